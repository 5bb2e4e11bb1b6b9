"""Offline copies of the JS and CSS that Great Expectations' Data Docs load from public CDNs.

GE's pages (index, validation results, suites) reference jQuery, Bootstrap, bootstrap-table, Font Awesome,
Vega and a few more on CDNs, which a closed network cannot reach: the index then renders empty. The
project pins each file to an npm package (name, version, sha512 of its registry tarball), `make` fetches
them once into a git-ignored cache (`python -m include.airflow.data_docs_assets`), and the Data Docs plugin
rewrites the CDN URLs of every page it serves to its own copies under `<prefix>/_offline_assets/`.
Files a package's CSS references relatively (Font Awesome's webfonts) resolve inside the same package.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import logging
import os
import re
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

from include.settings import REPO_ROOT

log = logging.getLogger(__name__)

ASSETS_ROUTE = "_offline_assets"
REGISTRY = "https://registry.npmjs.org"

# directory: (npm package, version, sha512 integrity of the registry tarball)
PACKAGES = {
    "jquery-3.7.1": ("jquery", "3.7.1", "m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAynV2BsfpTYrTRysYUdADVD7CkUUizgkpLfg=="),
    "popper.js-1.12.9": ("popper.js", "1.12.9",
                         "s0EEi9xiSCdqz9lV4IiVH5yIZnDX/U1t0tCjB+0jXx9jW8lrR7kOpVupiUg175ogqVoudpDXHF1p6dKATCHMeg=="),
    "bootstrap-4.3.1": ("bootstrap", "4.3.1",
                        "rXqOmH1VilAt2DyPzluTi2blhk17bO7ef+zLLPlWvG494pDxcM234pJ8wTc/6R40UWizAIIMgxjvxZg5kmsbag=="),
    "bootstrap-table-1.19.1": ("bootstrap-table", "1.19.1",
                               "WvV+l1AI/C+zThaKmfHmi/IuayVNB0qdFyEhFx1jyZhO0oLtNJNANkCR3rvJf6Dkh72dsLElxpE/bzK9seEQLA=="),
    "bootstrap-table-1.19.0": ("bootstrap-table", "1.19.0",
                               "L+USHm3X9FKocx/6yngGu12yF6r6s1Ntuc+hoIK2a2QQJjHw5kcySLiE2HY/9sEaSGAOfPbfQOtBH3uKkcpqEA=="),
    "bootstrap-datepicker-1.9.0": ("bootstrap-datepicker", "1.9.0",
                                   "9rYYbaVOheGYxjOr/+bJCmRPihfy+LkLSg4fIFMT9Od8WwWB/MB50w0JO1eBgKUMbb7PFHQD5uAfI3ArAxZRXA=="),
    "bootstrap-dark-1.1.0": ("@forevolve/bootstrap-dark", "1.1.0",
                             "A3ucpEpxPoTVO490lZZCfjPXxv832l7mm1IxX3bXyxvgwnPGXDLyh7dWrphXKO8YBAu3EswbBEu3VSW8NRMW3A=="),
    "fontawesome-free-6.6.0": ("@fortawesome/fontawesome-free", "6.6.0",
                               "60G28ke/sXdtS9KZCpZSHHkCbdsOGEhIUGlwq6yhY74UpTiToIh8np7A8yphhM4BWsvNFtIvLpi4co+h9Mr9Ow=="),
    # GE asks for vega@5, vega-lite@5 and vega-embed@6 (the newest of each major): pinned to the newest now
    "vega-5.33.1": ("vega", "5.33.1", "1fArfVDUqVbb5z8n+/nVQb+VNBzx8svY6CrsyTK4Ujm4yrd9I1auoKxBAPXLCavY1LcrbHUskQbGUP8gXOzyQw=="),
    "vega-lite-5.23.0": ("vega-lite", "5.23.0",
                         "l4J6+AWE3DIjvovEoHl2LdtCUkfm4zs8Xxx7INwZEAv+XVb6kR6vIN1gt3t2gN2gs/y4DYTs/RPoTeYAuEg6mA=="),
    "vega-embed-6.29.0": ("vega-embed", "6.29.0",
                          "PmlshTLtLFLgWtF/b23T1OwX53AugJ9RZ3qPE2c01VFAbgt3/GSNI/etzA/GzdrkceXFma+FDHNXUppKuM0U6Q=="),
}

# CDN URL in GE's templates (great_expectations/render/view/templates/) -> (package directory, file in it)
CDN_FILES = {
    "https://code.jquery.com/jquery-3.7.1.min.js": ("jquery-3.7.1", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": ("popper.js-1.12.9",
                                                                                 "dist/umd/popper.min.js"),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": ("bootstrap-4.3.1",
                                                                              "dist/js/bootstrap.min.js"),
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": ("bootstrap-4.3.1",
                                                                             "dist/css/bootstrap.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": ("bootstrap-table-1.19.1",
                                                                            "dist/bootstrap-table.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": ("bootstrap-table-1.19.1",
                                                                             "dist/bootstrap-table.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js": (
        "bootstrap-table-1.19.1", "dist/extensions/filter-control/bootstrap-table-filter-control.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css": (
        "bootstrap-table-1.19.0", "dist/extensions/filter-control/bootstrap-table-filter-control.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css": (
        "bootstrap-table-1.19.0", "dist/extensions/filter-control/bootstrap-table-filter-control.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js": (
        "bootstrap-datepicker-1.9.0", "dist/js/bootstrap-datepicker.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css": (
        "bootstrap-datepicker-1.9.0", "dist/css/bootstrap-datepicker.min.css"),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css": (
        "bootstrap-dark-1.1.0", "dist/css/bootstrap-prefers-dark.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": ("fontawesome-free-6.6.0",
                                                                                "css/all.min.css"),
    "https://cdn.jsdelivr.net/npm/vega@5": ("vega-5.33.1", "build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": ("vega-lite-5.23.0", "build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": ("vega-embed-6.29.0", "build/vega-embed.min.js"),
}
_SRI = re.compile(r'\s(?:integrity|crossorigin)="[^"]*"')
# GE's navbar logo, loaded from GE's S3 bucket with the context id in the URL: served from GE's own package
GE_LOGO = re.compile(r'https://great-expectations-web-assets\.s3\.[a-z0-9-]+\.amazonaws\.com/logo-long\.png[^"\']*')
GE_IMAGES = "great_expectations"  # the route of the images GE ships in its package


def assets_dir() -> Path:
    """Where `make` puts the copies: LAKEHOUSE_DATA_DOCS_ASSETS_DIR, default `.cache/data_docs_assets/`."""
    return Path(os.environ.get("LAKEHOUSE_DATA_DOCS_ASSETS_DIR") or REPO_ROOT / ".cache" / "data_docs_assets")


def offline_html(html: str, prefix: str) -> str:
    """`html` with every known CDN URL pointing at the copy served under `prefix`; the subresource-integrity
    attributes that came with them are dropped (the copies are checked against the registry's sha512)."""
    for url, (package, path) in CDN_FILES.items():
        html = re.sub(rf'(["\']){re.escape(url)}(["\'])', rf"\g<1>{prefix}/{ASSETS_ROUTE}/{package}/{path}\g<2>", html)
    html = GE_LOGO.sub(f"{prefix}/{ASSETS_ROUTE}/{GE_IMAGES}/logo-long.png", html)
    return _SRI.sub("", html)


def asset_file(relative: str) -> Path | None:
    """The fetched file `<package directory>/<path>`, or None (unknown package, a path leaving it, missing)."""
    package, _, path = relative.partition("/")
    parts = path.split("/")
    if package not in (*PACKAGES, GE_IMAGES) or not path or any(p in ("", ".", "..") or "\\" in p for p in parts):
        return None
    root = _ge_images() if package == GE_IMAGES else assets_dir() / package
    candidate = root.joinpath(*parts)
    if candidate.is_symlink() or not candidate.is_file():
        if not root.is_dir():
            log.warning("Data Docs assets are missing in %s: run `make` (python -m include.airflow.data_docs_assets)",
                        assets_dir())
        return None
    return candidate


def _ge_images() -> Path:
    """The images folder of the installed great_expectations package (found without importing it)."""
    spec = importlib.util.find_spec("great_expectations")
    return Path(spec.origin).parent / "render" / "view" / "static" / "images"


def fetch(target: Path) -> None:
    """Download each pinned package from the npm registry, check its sha512 and unpack it under `target`."""
    for directory, (name, version, integrity) in PACKAGES.items():
        if (target / directory / "package.json").is_file():
            continue
        url = f"{REGISTRY}/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
        digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
        if digest != integrity:
            raise RuntimeError(f"{url}: sha512 {digest} is not the pinned {integrity}")
        staging = target / f".{directory}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            archive.extractall(staging, filter="data")  # refuses links and paths leaving `staging`
        shutil.rmtree(target / directory, ignore_errors=True)
        (staging / "package").rename(target / directory)
        shutil.rmtree(staging)
        log.info("Data Docs asset %s@%s -> %s", name, version, target / directory)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    destination = assets_dir()
    destination.mkdir(parents=True, exist_ok=True)
    try:
        fetch(destination)
    except (OSError, RuntimeError) as exc:
        sys.stderr.write(f"could not fetch the Data Docs assets from {REGISTRY} into {destination}: {exc}\n")
        sys.exit(2)
