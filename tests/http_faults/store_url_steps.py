"""The store URL the HTTP-fault tests open: a moto bucket reached through a fault proxy's
endpoint, with moto's test credentials and plain HTTP allowed."""

from __future__ import annotations


def proxied_url(endpoint: str, bucket: str) -> str:
    return (
        f"s3://{bucket}?endpoint={endpoint}&region=us-east-1"
        "&access_key_id=testing&secret_access_key=testing&allow_http=true"
    )
