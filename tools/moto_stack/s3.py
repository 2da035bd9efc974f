"""moto_server with S3's DeleteObjects and HeadBucket authorized as AWS authorizes them, for the moto stack's
IAM enforcement, and STS session tokens from moto's seeded random (the same identities after a restart).

    python -m tools.moto_stack.s3 -H 127.0.0.1 -p PORT    (the tests' MotoServer)
    patch()                                                (tools/moto_stack/ecs.py applies it too)

AWS checks s3:DeleteObject of a DeleteObjects call against each key (arn:aws:s3:::bucket/key); moto 5.2.5
checks it against the bucket's ARN alone, so a role allowed to delete under runs/* only (the task role) is
refused every key, silently in Quiet mode. Here each key is checked as AWS checks it; a batch with any key the
caller may not delete is refused whole (AWS would delete the others: stricter, never looser).
"""

from __future__ import annotations

import sys

_patched = False


def patch() -> None:
    """Apply the patch to moto's S3 in this process (once)."""
    global _patched
    if _patched:
        return
    _patched = True
    import xmltodict
    from moto.s3 import responses

    # moto 5.2.5 authorizes HeadBucket as "s3:HeadBucket", which is no IAM action (only s3:* would grant it);
    # AWS authorizes it as s3:ListBucket on the bucket (Ray Train's storage check asks it: pyarrow's create_dir).
    responses.ACTION_MAP["BUCKET"]["HEAD"]["DEFAULT"] = "ListBucket"
    from moto.s3.exceptions import BucketAccessDeniedError, S3AccessDeniedError

    response_cls = responses.S3Response
    post = response_cls._bucket_response_post

    def bucket_response_post(self, request, bucket_name):
        self.path = self._get_path(request)
        if request.headers.get("Content-Length") and self.is_delete_keys():
            objects = xmltodict.parse(self.body, strip_whitespace=False).get("Delete", {}).get("Object", [])
            self.data["Action"] = "DeleteObject"
            try:
                for obj in objects if isinstance(objects, list) else [objects]:
                    self._authenticate_and_authorize_s3_action(bucket_name=bucket_name, key_name=obj["Key"])
            except (BucketAccessDeniedError, S3AccessDeniedError):
                return self._bucket_response_delete_keys(bucket_name, authenticated=False)
            return self._bucket_response_delete_keys(bucket_name)
        return post(self, request, bucket_name)

    response_cls._bucket_response_post = bucket_response_post
    _seeded_session_tokens()


def _seeded_session_tokens() -> None:
    """STS session tokens from moto's seeded random (/moto-api/seed), not os.urandom: a restarted server whose
    identities are made again after the same seed (tools/moto_stack/iam.py) gives the same keys, so a client
    made before an outage still signs as itself after it, as on AWS."""
    import base64

    from moto.moto_api._internal import mock_random  # noqa: PLC2701 (moto exports it nowhere else)
    from moto.sts import models, utils

    def random_session_token() -> str:
        prefix = utils.SESSION_TOKEN_PREFIX
        return prefix + base64.b64encode(mock_random.randbytes(266))[len(prefix) :].decode()

    models.random_session_token = random_session_token


def main(argv: list[str] | None = None) -> None:
    from moto.server import main as moto_server

    patch()
    moto_server(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
