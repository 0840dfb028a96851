"""The data-prep example (examples/dataprep/dataprep.py) runs end to end
against the server: upload tagged parquet shards, split them by rules with
bulk tagging jobs, list by tag and read only the selected shards with
pyarrow. The example checks its own result; this test runs it on a fresh
bucket and checks its summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REGION, unique_bucket_name

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "dataprep" / "dataprep.py"


def test_dataprep_example(server):
    bucket = unique_bucket_name("dataprep")
    env = dict(os.environ, AWS_ENDPOINT_URL=server.endpoint, AWS_ACCESS_KEY_ID=server.access_key,
               AWS_SECRET_ACCESS_KEY=server.secret_key, AWS_DEFAULT_REGION=REGION)
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--bucket", bucket, "--shards", "24"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    # 24 shards: 6 blurry (i % 4 == 3); of the 18 good, cam0 and cam1 hold 12.
    assert summary["train_objects"] == 12
    assert summary["train_rows"] == 1200
    assert summary["min_sharpness"] > 0.5
    assert [j["changed"] for j in summary["jobs"]] == [6, 6, 6]
