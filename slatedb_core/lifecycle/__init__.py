"""Lifecycle of databases: clones, unions (projection and union, SlateDB RFC 0004), hard and soft
destroy, and the steps they share."""
