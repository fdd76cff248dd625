"""Fixtures of the unit tests."""
import boto3
import pytest
from moto import mock_aws


@pytest.fixture
def aws(monkeypatch):
    """A CloudWatch client on moto's in-process AWS, with throwaway credentials and region."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "eu-west-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.client("cloudwatch", region_name="eu-west-1")
