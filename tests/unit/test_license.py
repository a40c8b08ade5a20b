"""The license pyproject.toml declares is in the tree and declared so that the wheel
carries it. Before: `license = { text = "Apache-2.0" }` and no LICENSE file anywhere, so
neither the wheel, the packages nor the image had the text. (The packages and the image
are checked in tests/system/test_packages.py and test_image_podman.py.)"""

from __future__ import annotations

import hashlib
import re
import sys

from tests.support.checkout import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

# SHA-256 of the Apache License 2.0 as the Apache Software Foundation publishes it
# (LICENSE-2.0.txt; Debian's /usr/share/common-licenses/Apache-2.0 is the same file)
APACHE_2_0 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_license_is_the_standard_apache_2_0_text() -> None:
    data = (REPO / "LICENSE").read_bytes()
    assert hashlib.sha256(data).hexdigest() == APACHE_2_0


def test_pyproject_declares_it_for_the_wheel() -> None:
    """PEP 639: an SPDX expression and the files (setuptools 77 puts them in the wheel's
    .dist-info/licenses/ and names them in License-File)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"
    assert pyproject["project"]["license-files"] == ["LICENSE"]
    [setuptools] = [r for r in pyproject["build-system"]["requires"]
                    if r.startswith("setuptools")]
    m = re.fullmatch(r"setuptools>=(\d+)", setuptools)
    assert m and int(m.group(1)) >= 77, setuptools
