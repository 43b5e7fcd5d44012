# SPDX-License-Identifier: MIT
"""The package installs with pip (into a fresh virtual environment, from the tree, with no
network) and its worker command runs from there."""
import os
import shutil
import subprocess
import sys

from conftest import PKG


def test_pip_install_from_the_tree(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, capture_output=True)
    py = str(venv / "bin" / "python")
    # From a copy: setuptools builds in the source directory, which must stay clean.
    src = tmp_path / "src"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                        "--quiet", str(src)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what pip installed
    r = subprocess.run([py, "-c", "import cairn, cairn.worker, cairn.client; "
                        "print(cairn.__file__)"], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0 and str(venv) in r.stdout, r.stdout + r.stderr
    r = subprocess.run([py, "-m", "cairn.worker", "--help"], capture_output=True, text=True,
                       env=env, cwd=tmp_path)
    assert r.returncode == 0 and "CAIRN_WORKER_URL" in r.stdout, r.stderr
