"""Lifecycle of databases: clones, unions (projection and union, RFC 0017), hard and soft destroy, and the steps they share."""
