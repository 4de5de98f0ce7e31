"""The deployment steps the README and the deploy page show, run as written: the gcloud scripts
path from an empty project to a passing `deploy/smoke.sh`, with the real gcloud against the fake
Google APIs (fake_gcp.py, whose Scheduler delivers to a real `runonce serve` configured as the
scripts deployed it). Every gcloud command shown is one gcloud accepts and names its project,
every HCL block is `terraform fmt`-clean, and the outputs tables list terraform/outputs.tf.

What the fake cannot stand in for is left out of the run, each for a reason (RUN_SKIPS); the
parse test still runs those commands through gcloud."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from deploy_tools import REPO, gcloud_env, smoke_env, tool
from fake_gcp import FakeGoogle

from runonce import __version__
from tests.support import oidc
from tests.support.doc_commands import Statement, blocks, shell_statements
from tests.support.procs import free_port, start_server

pytestmark = pytest.mark.deploy

STATEMENTS = shell_statements()
PROJECT, NUMBER, REGION = "my-project", "123456789012", "europe-west1"  # the pages' values
YOU = "you@example.com"  # the account gcloud runs as (`gcloud config get-value account`)
DIGEST = "sha256:" + "3" * 64
TF_ENV = {**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null", "CHECKPOINT_DISABLE": "1"}


def _ids(items: list) -> list[str]:
    return [f"{item.page.replace('/', '.')}:{item.line}" for item in items]


# -- HCL ----------------------------------------------------------------------------------------------

HCL = blocks(("hcl",))


@pytest.mark.parametrize("block", HCL, ids=_ids(HCL))
def test_every_hcl_block_shown_is_terraform_fmt_clean(block) -> None:
    result = subprocess.run(
        [tool("terraform"), "fmt", "-check", "-diff", "-no-color", "-"],
        input=block.text,
        env=TF_ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        formatted = subprocess.run(
            [tool("terraform"), "fmt", "-"], input=block.text, env=TF_ENV, capture_output=True, text=True
        )
        pytest.fail(f"{block.page}:{block.line}: terraform fmt would write it as:\n{formatted.stdout}")


def test_the_fmt_check_catches_a_misaligned_block() -> None:
    result = subprocess.run(
        [tool("terraform"), "fmt", "-check", "-"],
        input="a = 1\nlonger = 2\n",
        env=TF_ENV,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0


# -- the outputs tables -----------------------------------------------------------------------------

OUTPUT = re.compile(r'^output "(\w+)" \{\n  description = "((?:[^"\\]|\\.)*)"', re.M)


def outputs_table() -> str:
    """The outputs table the pages carry, from terraform/outputs.tf (names and descriptions)."""
    rows = ["| output | what it holds |", "|---|---|"]
    for name, description in OUTPUT.findall((REPO / "terraform" / "outputs.tf").read_text()):
        text = description.replace('\\"', '"').replace("<", "&lt;").replace(">", "&gt;")
        rows.append(f"| `{name}` | {text} |")
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("page", ["docs/getting-started/deploy.md", "terraform/README.md"])
def test_the_outputs_table_lists_every_output_of_the_module(page: str) -> None:
    table = outputs_table()
    declared = (REPO / "terraform" / "outputs.tf").read_text().count('\noutput "') + 1
    assert table.count("\n| `") == declared >= 13
    assert table in (REPO / page).read_text(), f"{page}: its outputs table must be, from terraform/outputs.tf:\n{table}"


# -- gcloud -------------------------------------------------------------------------------------------


def _gcloud_calls(statement: Statement) -> list[str]:
    """Each gcloud invocation of a statement: itself, and each `$(gcloud …)` in it."""
    calls = [statement.text] if statement.command == "gcloud" else []
    calls += [m.group(1) for m in re.finditer(r"\$\((gcloud [^()]*)\)", statement.text)]
    return calls


GCLOUD = [(s, call) for s in STATEMENTS for call in _gcloud_calls(s)]
UNSCOPED = ("gcloud config ", "gcloud auth ")  # the local configuration and identity, no project


def test_every_gcloud_command_shown_names_its_project() -> None:
    """A reader's default project may be another one: each command says which."""
    assert len(GCLOUD) >= 15
    assert [s.where for s, call in GCLOUD if not call.startswith(UNSCOPED) and "--project" not in call] == []


VALUES = {
    "PROJECT_ID": PROJECT,
    "REGION": REGION,
    "VERSION": __version__,
    "IMAGE": f"{REGION}-docker.pkg.dev/{PROJECT}/runonce/runonce:{__version__}",
    "URL": f"https://runonce-{NUMBER}.{REGION}.run.app",
    "RUNONCE_URL": f"https://runonce-{NUMBER}.{REGION}.run.app",
}


@pytest.mark.parametrize(("statement", "call"), GCLOUD, ids=_ids([s for s, _ in GCLOUD]))
def test_each_gcloud_command_shown_is_one_gcloud_accepts(statement: Statement, call: str, tmp_path: Path) -> None:
    """Sent to the fake: an API it lacks answers an error (exit 1), but a flag or argument gcloud
    does not take exits 2 before anything is sent."""
    (tmp_path / "cloudbuild.yaml").symlink_to(REPO / "cloudbuild.yaml")
    with FakeGoogle(PROJECT, NUMBER) as fake:
        env = {**gcloud_env(fake.port, tmp_path), **VALUES, "CLOUDSDK_CORE_ACCOUNT": YOU}
        result = subprocess.run(
            ["bash", "-c", call], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
    assert result.returncode != 2, f"{statement.where}\ngcloud refused it:\n{result.stderr}"
    assert "unrecognized arguments" not in result.stderr and "argument " not in result.stderr.split("ERROR:")[-1][:40]


def test_the_gcloud_check_catches_a_flag_gcloud_does_not_take(tmp_path: Path) -> None:
    with FakeGoogle(PROJECT, NUMBER) as fake:
        env = gcloud_env(fake.port, tmp_path)
        bad = "gcloud logging read 'severity=ERROR' --project my-project --limits 5"
        result = subprocess.run(["bash", "-c", bad], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr


# -- the gcloud scripts path, run as written --------------------------------------------------------

RUN_SKIPS = {
    "gcloud services enable": "the fake has no Service Usage API (the scripts' own calls need none)",
    "gcloud artifacts repositories create": "the fake holds one pushed image instead",
    "gcloud builds submit": "no Cloud Build here: tests/deploy/test_image.py builds the image",
    "gcloud scheduler jobs run nightly-export": "delivers to a Cloud Run job, which only Google runs",
    "gcloud run jobs executions list": "a Cloud Run job's executions: only Google runs them",
    "gcloud logging read": "the fake keeps no logs",
    "terraform ": "no provider here: tests/deploy/test_terraform.py checks the module",
}


def _page_path(page: str) -> list[Statement]:
    """The page's commands in order, from the first `PROJECT_ID=` to the smoke test, less RUN_SKIPS."""
    statements = [s for s in STATEMENTS if s.page == page]
    first = next(i for i, s in enumerate(statements) if s.text.startswith("PROJECT_ID="))
    last = max(i for i, s in enumerate(statements) if "deploy/smoke.sh" in s.programs)
    return [s for s in statements[first : last + 1] if not s.text.startswith(tuple(RUN_SKIPS))]


def _routes_yaml(page: str) -> str:
    (block,) = [b for b in blocks(("yaml",)) if b.page == page and b.text.startswith("# routes.yaml")]
    return block.text


def _deployed_env(fake: FakeGoogle) -> dict[str, str]:
    (container,) = fake.state.services["runonce"]["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started/deploy.md"])
def test_the_gcloud_path_of_the_page_deploys_and_passes_the_smoke_test(page: str, tmp_path: Path) -> None:
    work = tmp_path / "checkout"
    work.mkdir()
    for name in ("deploy", "runonce"):
        (work / name).symlink_to(REPO / name)
    (work / "routes.yaml").write_text(_routes_yaml(page))
    (work / "state.sh").write_text("")
    port = free_port()
    local = f"http://127.0.0.1:{port}"  # where the service answers here, instead of its run.app URL
    servers = []
    with FakeGoogle(PROJECT, NUMBER) as fake:
        fake.push_image(VALUES["IMAGE"].rsplit(":", 1)[0], __version__, DIGEST)
        fake.caller = f"user:{YOU}"  # minting the reader's tokens needs the grant the page gives
        env = {**gcloud_env(fake.port, tmp_path), **smoke_env(fake.port), "CLOUDSDK_CORE_ACCOUNT": YOU}
        env["SERVICE_URL"] = local  # smoke.sh and audit-job.sh: the service's URL (audience, job target)
        try:
            outputs = []
            for statement in _page_path(page):
                if "deploy/smoke.sh" in statement.programs and not servers:
                    servers.append(_serve_as_deployed(fake, port, tmp_path))
                # one shell session across the statements: what one sets, the next sees
                script = f"set -a; . ./state.sh\n{statement.text}\nrc=$?; export -p > state.sh; exit $rc"
                result = subprocess.run(
                    ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300
                )
                assert result.returncode == 0, f"{statement.where}\nexit {result.returncode}:\n{result.stderr[-3000:]}"
                outputs.append(result.stdout)
        finally:
            for server, certs in servers:
                server.stop()
                certs.stop()
        assert fake.violations == [], "gcloud sent requests that break Google's API descriptions"
    smoke = outputs[-1].splitlines()
    assert [line.split(":")[0] for line in smoke] == [
        "ok    token accepted",
        "ok    one run recorded",
        "ok    second delivery a duplicate",
    ], outputs[-1]


def _serve_as_deployed(fake: FakeGoogle, port: int, tmp_path: Path):
    """`runonce serve` with the settings the scripts deployed, but a local store, the fake's
    signing key, and the local URL as the audience."""
    deployed = _deployed_env(fake)
    assert deployed["RUNONCE_ADMIN_CALLERS"] == f"runonce-auditor@{PROJECT}.iam.gserviceaccount.com"
    certs = oidc.CertsServer([fake.key]).start()
    env = {
        **deployed,
        "RUNONCE_STORE": f"sqlite:///{tmp_path / 'runs.db'}",
        "RUNONCE_AUDIENCE": f"http://127.0.0.1:{port}",
        "RUNONCE_OIDC_CERTS_URL": certs.url,
    }
    return start_server(env, tmp_path, port=port), certs
