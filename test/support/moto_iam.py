"""IAM set-up for tests that run moto_server with IAM enforcement: what an operator provisions, through boto3.

stdin: {"endpoint", "buckets": [...], "objects": [{"bucket", "key", "body"}], "worker": user name,
        "roles": {role name: policy document}} -> stdout: {"access_key", "secret_key"} of the worker's key.
Or {"endpoint", "revoke": role name}: removes the role's policy, as an operator revokes an organization's access.
"""
import json
import sys

import boto3

ACCOUNT = "123456789012"  # moto's default account
spec = json.load(sys.stdin)
kw = dict(endpoint_url=spec["endpoint"], region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup")
iam = boto3.client("iam", **kw)
if "revoke" in spec:
    iam.delete_role_policy(RoleName=spec["revoke"], PolicyName="storage")
    print("{}")
    sys.exit(0)
s3 = boto3.client("s3", **kw)
for bucket in spec["buckets"]:
    s3.create_bucket(Bucket=bucket)
for o in spec["objects"]:
    s3.put_object(Bucket=o["bucket"], Key=o["key"], Body=o["body"].encode())
worker = spec["worker"]
iam.create_user(UserName=worker)
iam.put_user_policy(UserName=worker, PolicyName="assume-job-roles", PolicyDocument=json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": f"arn:aws:iam::{ACCOUNT}:role/*"}]}))
key = iam.create_access_key(UserName=worker)["AccessKey"]
trust = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/{worker}"}, "Action": "sts:AssumeRole"}]}
for name, policy in spec["roles"].items():
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust), MaxSessionDuration=43200)
    iam.put_role_policy(RoleName=name, PolicyName="storage", PolicyDocument=json.dumps(policy))
print(json.dumps({"access_key": key["AccessKeyId"], "secret_key": key["SecretAccessKey"]}))
