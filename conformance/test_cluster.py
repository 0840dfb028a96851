"""The cluster through real clients: `laneway cluster local` with three
store nodes and two gateways (started once for the module; 8 partitions),
used with the aws CLI and boto3 through either gateway.

- one namespace: what is written through one gateway is read, tagged,
  listed and deleted through the other;
- a bucket created through one gateway is usable at once through the
  other; one deleted through gateway 1 refuses writes on gateway 2 within
  5 s, as a revoked key and a suspended tenant do;
- a quota holds when both gateways upload at once for the same tenant;
- a multipart upload started through one gateway completes through the
  other;
- LIST of a bucket whose keys lie on every partition returns every key,
  in order, page after page.

Teardown sends the supervisor SIGTERM: it must exit 0 and leave no child.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from cluster_util import PROPAGATION_S, LocalCluster, poll
from conftest import ACCESS_KEY, SECRET_KEY, unique_bucket_name
from s3util import error_code, expect_error, quoted_md5, tags_dict

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own cluster; not with LANEWAY_ENDPOINT"
)

MIB = 1024 * 1024
# A change through gateway 1 is seen by gateway 2 within PROPAGATION_S; the
# poll that observes it adds one request and one interval.
PROPAGATION_MARGIN_S = 1.5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("cluster"))
    yield c
    code = c.stop()
    assert code == 0, f"cluster local exited {code} after SIGTERM\n{c.logs()}"
    assert "stopped gateway-1" in c.stdout() and "stopped store-3" in c.stdout(), c.stdout()


def test_summary_names_every_child_and_the_exports(cluster):
    names = [c.name for c in cluster.children]
    assert names == ["gateway-1", "gateway-2", "store-1", "store-2", "store-3"]
    base = cluster.base_port
    assert [g.listens for g in cluster.gateways] == [f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"]
    assert [g.admin for g in cluster.gateways] == [f"http://127.0.0.1:{base + 2}", f"http://127.0.0.1:{base + 3}"]
    assert [s.listens for s in cluster.stores] == [f"rpc://127.0.0.1:{base + 4 + i}" for i in range(3)]
    out = cluster.stdout()
    assert f"export AWS_ENDPOINT_URL=http://127.0.0.1:{base}\n" in out
    # A new cluster: gateway 1 made the first key from the environment,
    # and its export lines are shown again.
    assert f"export AWS_ACCESS_KEY_ID={ACCESS_KEY}\n" in out
    assert f"export AWS_SECRET_ACCESS_KEY={SECRET_KEY}\n" in out
    assert out.rstrip("\n").splitlines()[-1] == "laneway cluster local ready"
    assert (cluster.dir / "cluster.toml").is_file()
    assert (cluster.dir / "logs" / "store-2.log").is_file()
    # The admin token came from the environment: not written, not printed.
    assert not (cluster.dir / "admin.token").exists()
    assert "LANEWAY_ADMIN_TOKEN=" not in out


def test_aws_cli_one_namespace_through_both_gateways(cluster, tmp_path):
    bucket = unique_bucket_name("cluster-cli")
    url = f"s3://{bucket}"
    assert f"make_bucket: {bucket}" in cluster.aws(0, "s3", "mb", url).stdout
    small = tmp_path / "hello.txt"
    small.write_bytes(b"hello from gateway 2\n")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(9 * MIB + 5))  # past the CLI's 8 MiB multipart threshold
    cluster.aws(1, "s3", "cp", str(small), f"{url}/docs/hello.txt")
    cluster.aws(1, "s3", "cp", str(big), f"{url}/data/big.bin")

    listing = cluster.aws(0, "s3", "ls", "--recursive", f"{url}/").stdout
    assert "docs/hello.txt" in listing and "data/big.bin" in listing and str(big.stat().st_size) in listing
    for gateway in (0, 1):
        for key, src in (("docs/hello.txt", small), ("data/big.bin", big)):
            down = tmp_path / f"down-{gateway}-{src.name}"
            cluster.aws(gateway, "s3", "cp", f"{url}/{key}", str(down))
            assert down.read_bytes() == src.read_bytes(), (gateway, key)

    tagging = json.dumps({"TagSet": [{"Key": "via", "Value": "gateway-2"}]})
    cluster.aws(1, "s3api", "put-object-tagging", "--bucket", bucket, "--key", "docs/hello.txt", "--tagging", tagging)
    got = cluster.aws(0, "s3api", "get-object-tagging", "--bucket", bucket, "--key", "docs/hello.txt", "--output", "json")
    assert tags_dict(json.loads(got.stdout)["TagSet"]) == {"via": "gateway-2"}

    removed = cluster.aws(0, "s3", "rm", "--recursive", f"{url}/").stdout
    assert f"delete: {url}/docs/hello.txt" in removed and f"delete: {url}/data/big.bin" in removed
    assert cluster.aws(1, "s3", "ls", "--recursive", f"{url}/", check=False).stdout.strip() == ""
    assert f"remove_bucket: {bucket}" in cluster.aws(1, "s3", "rb", url).stdout
    for gateway in (0, 1):
        assert bucket not in cluster.aws(gateway, "s3", "ls").stdout


def test_boto3_one_namespace_through_both_gateways(cluster):
    one, two = cluster.client(0), cluster.client(1)
    bucket = unique_bucket_name("cluster-boto3")
    two.create_bucket(Bucket=bucket)
    body = os.urandom(64 * 1024)
    put = one.put_object(Bucket=bucket, Key="k/one", Body=body, Metadata={"side": "one"})
    got = two.get_object(Bucket=bucket, Key="k/one")
    assert got["Body"].read() == body and got["ETag"] == put["ETag"] == quoted_md5(body)
    assert got["Metadata"] == {"side": "one"}
    one.copy_object(Bucket=bucket, Key="k/copy", CopySource={"Bucket": bucket, "Key": "k/one"})
    assert two.head_object(Bucket=bucket, Key="k/copy")["ContentLength"] == len(body)
    assert [o["Key"] for o in two.list_objects_v2(Bucket=bucket)["Contents"]] == ["k/copy", "k/one"]
    two.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k/one"}, {"Key": "k/copy"}]})
    assert one.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    one.delete_bucket(Bucket=bucket)
    expect_error("404", 404, one.head_bucket, Bucket=bucket)
    poll(lambda: error_code(lambda: two.head_bucket(Bucket=bucket)) == "404", PROPAGATION_S + PROPAGATION_MARGIN_S,
         what="gateway 2 no longer finds the deleted bucket")


def test_a_new_bucket_is_usable_at_once_through_the_other_gateway(cluster):
    clients = [cluster.client(0), cluster.client(1)]
    for i in range(6):
        maker, user = clients[i % 2], clients[(i + 1) % 2]
        bucket = unique_bucket_name(f"cluster-new-{i}")
        maker.create_bucket(Bucket=bucket)
        user.put_object(Bucket=bucket, Key="first", Body=b"at once")
        assert maker.get_object(Bucket=bucket, Key="first")["Body"].read() == b"at once"


def new_tenant(cluster, name: str, **limits) -> dict:
    """A tenant made through gateway 1's admin API; its first key, once
    gateway 2 takes it too (within PROPAGATION_S, as any key change)."""
    key = cluster.api(0, "POST", "/v1/tenants", {"name": name, **limits})["key"]
    on_two = cluster.client(1, key)
    poll(lambda: error_code(on_two.list_buckets) == "OK", PROPAGATION_S + PROPAGATION_MARGIN_S,
         what="gateway 2 takes the new key")
    return key


def test_a_new_key_works_on_the_other_gateway_within_5s(cluster):
    key = cluster.api(0, "POST", "/v1/tenants", {"name": f"new-{uuid.uuid4().hex[:8]}"})["key"]
    assert error_code(cluster.client(0, key).list_buckets) == "OK"
    on_two = cluster.client(1, key)
    poll(lambda: error_code(on_two.list_buckets) == "OK", PROPAGATION_S + PROPAGATION_MARGIN_S,
         what="gateway 2 takes the new key")


def test_revoked_key_is_refused_by_the_other_gateway_within_5s(cluster):
    name = f"revoke-{uuid.uuid4().hex[:8]}"
    key = new_tenant(cluster, name)
    on_two = cluster.client(1, key)
    on_two.list_buckets()  # works, and fills gateway 2's credential cache
    cluster.api(0, "DELETE", f"/v1/tenants/{name}/keys/{key['access_key']}")
    assert error_code(cluster.client(0, key).list_buckets) == "InvalidAccessKeyId"
    _, took = poll(lambda: error_code(on_two.list_buckets) == "InvalidAccessKeyId",
                   PROPAGATION_S + PROPAGATION_MARGIN_S, what="gateway 2 refuses the revoked key")
    assert took <= PROPAGATION_S + PROPAGATION_MARGIN_S


def test_suspended_tenant_is_refused_by_the_other_gateway_within_5s(cluster):
    name = f"suspend-{uuid.uuid4().hex[:8]}"
    key = new_tenant(cluster, name)
    on_two = cluster.client(1, key)
    bucket = unique_bucket_name("cluster-suspend")
    on_two.create_bucket(Bucket=bucket)
    cluster.api(0, "POST", f"/v1/tenants/{name}/suspend")
    write = lambda: on_two.put_object(Bucket=bucket, Key="k", Body=b"x")  # noqa: E731
    poll(lambda: error_code(write) == "AccessDenied", PROPAGATION_S + PROPAGATION_MARGIN_S,
         what="gateway 2 refuses the suspended tenant")
    cluster.api(0, "POST", f"/v1/tenants/{name}/resume")
    poll(lambda: error_code(write) == "OK", PROPAGATION_S + PROPAGATION_MARGIN_S,
         what="gateway 2 serves the resumed tenant")


def test_deleted_bucket_takes_no_writes_on_the_other_gateway_within_5s(cluster):
    one, two = cluster.client(0), cluster.client(1)
    bucket = unique_bucket_name("cluster-deleted")
    one.create_bucket(Bucket=bucket)
    two.put_object(Bucket=bucket, Key="k", Body=b"x")  # gateway 2 knows the bucket
    one.delete_object(Bucket=bucket, Key="k")
    one.delete_bucket(Bucket=bucket)
    write = lambda: two.put_object(Bucket=bucket, Key="after", Body=b"late")  # noqa: E731
    poll(lambda: error_code(write) == "NoSuchBucket", PROPAGATION_S + PROPAGATION_MARGIN_S,
         what="gateway 2 refuses writes to the deleted bucket")
    # Nothing a refused write did is left: the name is free and empty.
    one.create_bucket(Bucket=bucket)
    assert two.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    one.delete_bucket(Bucket=bucket)


def test_quota_holds_with_two_gateways_uploading_at_once(cluster):
    """8 MiB quota, 1 MiB objects, 24 uploads from four threads, two per
    gateway: exactly 8 are stored (a refusal means the quota was reached
    counting uploads in flight, and every upload in flight then commits),
    and usage never passes the quota."""
    name = f"quota-{uuid.uuid4().hex[:8]}"
    quota = 8 * MIB
    key = new_tenant(cluster, name, quota_bytes=quota)
    bucket = unique_bucket_name("cluster-quota")
    cluster.client(0, key).create_bucket(Bucket=bucket)
    body = os.urandom(MIB)
    outcomes: list[str] = []
    lock = threading.Lock()

    def uploader(worker: int) -> None:
        client = cluster.client(worker % 2, key)
        for i in range(6):
            code = error_code(lambda: client.put_object(Bucket=bucket, Key=f"w{worker}/{i}", Body=body))
            with lock:
                outcomes.append(code)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(uploader, range(4)))
    assert set(outcomes) <= {"OK", "QuotaExceeded"}, outcomes
    stored = cluster.client(1, key).list_objects_v2(Bucket=bucket).get("Contents", [])
    assert sum(o["Size"] for o in stored) <= quota
    assert outcomes.count("OK") == len(stored) == quota // MIB, outcomes
    usage = cluster.api(1, "GET", f"/v1/tenants/{name}/usage")
    assert usage["bytes"] == len(stored) * MIB


def test_multipart_upload_started_on_one_gateway_completes_on_the_other(cluster):
    one, two = cluster.client(0), cluster.client(1)
    bucket = unique_bucket_name("cluster-mpu")
    one.create_bucket(Bucket=bucket)
    parts_data = [os.urandom(5 * MIB), os.urandom(MIB + 7)]
    upload = one.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    etags = [
        two.upload_part(Bucket=bucket, Key="big", UploadId=upload, PartNumber=1, Body=parts_data[0])["ETag"],
        one.upload_part(Bucket=bucket, Key="big", UploadId=upload, PartNumber=2, Body=parts_data[1])["ETag"],
    ]
    listed = two.list_parts(Bucket=bucket, Key="big", UploadId=upload)["Parts"]
    assert [(p["PartNumber"], p["ETag"]) for p in listed] == [(1, etags[0]), (2, etags[1])]
    assert [u["UploadId"] for u in one.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [upload]
    done = two.complete_multipart_upload(
        Bucket=bucket, Key="big", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]},
    )
    digests = b"".join(hashlib.md5(p).digest() for p in parts_data)
    assert done["ETag"] == f'"{hashlib.md5(digests).hexdigest()}-2"'
    got = one.get_object(Bucket=bucket, Key="big")
    assert got["Body"].read() == b"".join(parts_data) and got["ETag"] == done["ETag"]
    assert "Uploads" not in two.list_multipart_uploads(Bucket=bucket)


def test_list_returns_every_key_of_every_partition_in_order(cluster):
    """300 keys written through both gateways land on all 8 partitions (a
    partition left empty has odds below 1e-16); listed through either
    gateway in pages of 37, with and without a delimiter, every key comes
    back once and in order."""
    bucket = unique_bucket_name("cluster-list")
    cluster.client(0).create_bucket(Bucket=bucket)
    keys = sorted(f"{d}/{uuid.uuid4().hex[:12]}" for d in ("a", "b", "c") for _ in range(100))
    clients = [cluster.client(0), cluster.client(1)]

    def put(i: int) -> None:
        clients[i % 2].put_object(Bucket=bucket, Key=keys[i], Body=keys[i].encode())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(len(keys))))
    for client in clients:
        seen, token = [], None
        while True:
            args = {"Bucket": bucket, "MaxKeys": 37, **({"ContinuationToken": token} if token else {})}
            page = client.list_objects_v2(**args)
            seen += [o["Key"] for o in page.get("Contents", [])]
            if not page["IsTruncated"]:
                break
            token = page["NextContinuationToken"]
        assert seen == keys
        top = client.list_objects_v2(Bucket=bucket, Delimiter="/")
        assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["a/", "b/", "c/"]
        under_b = client.list_objects_v2(Bucket=bucket, Prefix="b/", MaxKeys=1000)
        assert [o["Key"] for o in under_b["Contents"]] == [k for k in keys if k.startswith("b/")]
    clients[1].delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
    assert clients[0].list_objects_v2(Bucket=bucket)["KeyCount"] == 0
