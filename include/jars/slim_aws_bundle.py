"""Keep of the AWS SDK v2 bundle jar what Hadoop's S3A connector loads: the SDK's core, its shaded third-party
libraries, and the S3 and STS clients (run by `make` after Maven fetched the jars).

The bundle holds every AWS service's client (software/amazon/awssdk/services/<service>/: 398,000 files, 686 MB for
2.35.4); every driver and executor would open it and a cluster's executors copy it. Its classes are kept byte for
byte, so the jar is still the SDK release Hadoop was built against.

    python include/jars/slim_aws_bundle.py .cache/jars/bundle-2.35.4.jar
"""

from __future__ import annotations

import os
import sys
import zipfile

KEPT_SERVICES = ("s3", "sts")  # S3A's client, and its assumed-role credentials


def kept(name: str) -> bool:
    parts = name.split("/")
    return not (parts[:4] == ["software", "amazon", "awssdk", "services"] and len(parts) > 5
                and parts[4] not in KEPT_SERVICES)


def slim(jar: str) -> tuple[int, int]:
    """Rewrite `jar` in place with the entries :func:`kept` keeps; (entries kept, entries dropped)."""
    partial = f"{jar}.slim"
    kept_count = dropped = 0
    with zipfile.ZipFile(jar) as source, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if kept(info.filename):
                target.writestr(info, source.read(info.filename))
                kept_count += 1
            else:
                dropped += 1
    os.replace(partial, jar)
    return kept_count, dropped


if __name__ == "__main__":
    for path in sys.argv[1:]:
        count, dropped = slim(path)
        sys.stdout.write(f"{path}: kept {count} entries (the SDK's core, {', '.join(KEPT_SERVICES)}), dropped {dropped}\n")
