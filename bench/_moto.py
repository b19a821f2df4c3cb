"""A moto S3 server on 127.0.0.1 for benchmarks (same setup as the tests' fixture)."""

from __future__ import annotations

import uuid

from slatedb_core.testing.ports import free_port


class MotoServer:
    def __init__(self) -> None:
        import boto3
        from moto.server import ThreadedMotoServer

        from tests.conftest import make_moto_conditional_puts_atomic

        make_moto_conditional_puts_atomic()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self._client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        )

    def new_bucket_url(self) -> str:
        bucket = f"b-{uuid.uuid4().hex[:16]}"
        self._client.create_bucket(Bucket=bucket)
        return (
            f"s3://{bucket}?endpoint={self.endpoint}&region=us-east-1&access_key_id=bench"
            "&secret_access_key=bench&allow_http=true"
        )

    def stop(self) -> None:
        self._server.stop()
