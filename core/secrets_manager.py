"""A secret's value from AWS Secrets Manager (the target server's login, docs/secrets.md), read once per process.

Every worker of a migration asks for the target's address; reading the secret once keeps them from
multiplying GetSecretValue calls (billed per call, and throttled). boto3 is imported only here and only
when a secret is configured, so runs without one never load it.
"""
from __future__ import annotations

import threading

from core.config_file import ConfigError

VARIABLE = "STREAM_OSC_TARGET_SECRET_ID"

# What an AWS error code means for the user, beyond its name
HINTS = {
    "AccessDeniedException": "the tool's AWS identity needs secretsmanager:GetSecretValue on it "
                             "(and kms:Decrypt on its key when that is a customer-managed one)",
    "ResourceNotFoundException": "no secret of that id in this region (STREAM_OSC_TARGET_SECRET_REGION)",
    "DecryptionFailure": "its KMS key cannot be used by the tool's AWS identity",
}

_values: dict[tuple[str, str], str] = {}
_lock = threading.Lock()


def secret_string(secret_id: str, region: str = "") -> str:
    """The SecretString of `secret_id` (in `region`, else boto3's own region), fetched at most once per process.

    ConfigError names the secret and the AWS error code, never any part of the value.
    """
    with _lock:
        key = (secret_id, region)
        if key not in _values:
            _values[key] = _fetch(secret_id, region)
        return _values[key]


def _fetch(secret_id: str, region: str) -> str:
    import boto3
    import botocore.exceptions

    where = f"cannot read the Secrets Manager secret {secret_id} ({VARIABLE})"
    try:
        client = boto3.client("secretsmanager", region_name=region or None)
        answer = client.get_secret_value(SecretId=secret_id)
    except botocore.exceptions.NoRegionError:
        raise ConfigError(f"{where}: no AWS region; set STREAM_OSC_TARGET_SECRET_REGION, AWS_REGION or a "
                          "profile's region") from None
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "unknown error")
        hint = f" ({HINTS[code]})" if code in HINTS else ""
        raise ConfigError(f"{where}: {code}{hint}") from None
    except botocore.exceptions.BotoCoreError as exc:   # no credentials, no connection
        raise ConfigError(f"{where}: {type(exc).__name__}") from None
    if "SecretString" not in answer:
        raise ConfigError(f"{where}: it holds binary data, not a SecretString (JSON or a mysql:// DSN)")
    return answer["SecretString"]
