"""Where the deployment checks find their tools, and a precise failure when one is missing.

`.ci/deploy-checks` installs them: Debian packages (podman, buildah, debootstrap, runc), the npm
package @cdktf/provider-google, and checkov / hadolint / python-hcl2 in venvs of their own under
`.tools/` (never in the project's .venv).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("RUNONCE_DEPLOY_TOOLS", REPO / ".tools"))
INSTALL_HINT = "run .ci/deploy-checks (it installs every deployment-check tool, then runs these tests)"

PROVIDER_LIBS = {  # the newest provider checked, and the lowest terraform/versions.tf allows
    "newest": TOOLS / "npm/node_modules/@cdktf/provider-google/lib",
    "lowest": TOOLS / "npm-lowest/node_modules/@cdktf/provider-google/lib",
}


def tool(path: Path | str) -> str:
    """A tool under .tools/ (e.g. `checkov/bin/checkov`), or a command on PATH (e.g. `podman`)."""
    candidate = TOOLS / path
    if candidate.exists():
        return str(candidate)
    found = shutil.which(str(path))
    if found and "/" not in str(path):
        return found
    raise RuntimeError(f"{path} is missing: {INSTALL_HINT}")


def provider_lib(which: str = "newest") -> Path:
    lib = PROVIDER_LIBS[which]
    if not lib.is_dir():
        raise RuntimeError(f"npm package @cdktf/provider-google not found in {lib.parent.parent}: {INSTALL_HINT}")
    return lib


def provider_version(lib: Path) -> str:
    """The Google provider version a @cdktf/provider-google package was generated from."""
    return json.loads((lib.parent / "package.json").read_text())["cdktf"]["provider"]["version"]


def run(
    args: list[str], *, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command, capture its output, and on failure raise with everything it printed."""
    result = subprocess.run(args, cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        )
    return result
