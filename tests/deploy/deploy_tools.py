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


GCLOUD_APIS = (
    "cloudscheduler",
    "iam",
    "cloudresourcemanager",
    "firestore",
    "run",
    "serviceusage",
    "artifactregistry",
    "spanner",
    "cloudtasks",
    "logging",
    "monitoring",
)


def gcloud_env(fake_port: int, home: Path) -> dict[str, str]:
    """The environment in which the real gcloud sends every Google API call to the fake on
    `fake_port` (fake_gcp.py), with a config of its own under `home`."""
    gcloud = tool("gcloud")
    config = home / "gcloud-config"
    config.mkdir(exist_ok=True)
    token = home / "token"
    token.write_text("ya29.fake-token")
    env = {
        "PATH": f"{Path(gcloud).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "CLOUDSDK_CONFIG": str(config),
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
        "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE": str(token),
        "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
        "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "1",
        # gcloud puts the region in front of Cloud Run's host, so only a proxy reaches them all.
        "CLOUDSDK_PROXY_TYPE": "http",
        "CLOUDSDK_PROXY_ADDRESS": "127.0.0.1",
        "CLOUDSDK_PROXY_PORT": str(fake_port),
        "PYTHON": shutil.which("python3") or "python3",
    }
    for api in GCLOUD_APIS:
        env[f"CLOUDSDK_API_ENDPOINT_OVERRIDES_{api.upper()}"] = f"http://{api}.fake.invalid/"
    return env


def smoke_env(fake_port: int) -> dict[str, str]:
    """What deploy/smoke.sh needs on top: gcloud mints the identity token through google-auth's own
    session, which reads the standard proxy variables rather than gcloud's proxy settings; runonce
    itself is reached directly; `runonce key` from the checkout's virtualenv."""
    proxy = f"http://127.0.0.1:{fake_port}"
    return {
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_IAMCREDENTIALS": "http://iamcredentials.fake.invalid/",
        "RUNONCE": str(REPO / ".venv" / "bin" / "runonce"),
        "HTTP_PROXY": proxy,
        "http_proxy": proxy,
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }
