"""The release recipe, cloudbuild.yaml, checked offline: a Build that Cloud Build's API accepts (held
to its discovery document), which builds this directory's Dockerfile for linux/amd64, pushes exactly
the image it built to Artifact Registry, and refuses an image whose `runonce --version` is not the
tag it is pushed as (its check step run for real, with `docker` stubbed to print the real CLI's
answer)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from deploy_tools import REPO

from runonce import __version__
from runonce.cli import main
from tests.support.discovery import Discovery

pytestmark = pytest.mark.deploy

RECIPE = yaml.safe_load((REPO / "cloudbuild.yaml").read_text())
BUILT_INS = {"PROJECT_ID", "TAG_NAME"}
"""The Cloud Build substitutions the recipe may use without declaring them."""


def _expand(text: str, values: dict[str, str]) -> str:
    """Cloud Build's substitution: `$NAME` and `${NAME}` (and `${NAME#prefix}`), `$$` = a literal `$`."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, strip = match.group(1) or match.group(3), match.group(2)
        value = values[name]
        return value.removeprefix(strip) if strip else value

    return re.sub(r"\$\$|\$\{([A-Z_][A-Z0-9_]*)(?:#([^}]*))?\}|\$([A-Z_][A-Z0-9_]*)", one, text)


def _values(**given: str) -> dict[str, str]:
    values = {"PROJECT_ID": "my-project", "TAG_NAME": ""}
    values.update({name: _expand(str(value), values) for name, value in RECIPE["substitutions"].items()})
    values.update(given)
    return values


def test_the_recipe_is_a_build_cloud_builds_api_accepts() -> None:
    Discovery("cloudbuild.v1").match("POST", "v1/projects/my-project/builds", {}, RECIPE)


def test_every_substitution_used_is_declared_or_built_in() -> None:
    text = (REPO / "cloudbuild.yaml").read_text().split("\n", 1)[1]
    used = set(re.findall(r"(?<!\$)\$\{?([A-Z_][A-Z0-9_]*)", text))
    declared = set(RECIPE["substitutions"])
    assert used - declared <= BUILT_INS, used - declared - BUILT_INS
    assert all(name.startswith("_") for name in declared)  # Cloud Build's rule for user substitutions
    assert RECIPE["options"]["dynamicSubstitutions"] is True  # _TAG's default expands TAG_NAME


def test_it_pushes_the_image_it_built_to_artifact_registry() -> None:
    values = _values(_REGION="europe-west1", _TAG="0.1.0")
    build = next(step for step in RECIPE["steps"] if step["id"] == "build")
    args = [_expand(arg, values) for arg in build["args"]]
    assert args[0] == "build" and args[-1] == "." and (REPO / "Dockerfile").exists()
    assert "--platform=linux/amd64" in args
    tags = [arg.removeprefix("--tag=") for arg in args if arg.startswith("--tag=")]
    assert tags == [_expand(image, values) for image in RECIPE["images"]]
    assert tags == ["europe-west1-docker.pkg.dev/my-project/runonce/runonce:0.1.0"]  # the deploy page's IMAGE


def test_a_git_tag_names_the_image_without_its_v() -> None:
    values = _values(TAG_NAME="v1.2.3")
    values["_TAG"] = _expand(RECIPE["substitutions"]["_TAG"], values)
    assert _expand(RECIPE["images"][0], values).endswith("/runonce:1.2.3")


def _run_check(tag: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The check-version step's script, with `docker run` answering as the image would."""
    printed = CliRunner().invoke(main, ["--version"]).output.strip()
    docker = tmp_path / "docker"
    docker.write_text(f"#!/bin/sh\necho '{printed}'\n")
    docker.chmod(0o755)
    step = next(step for step in RECIPE["steps"] if step["id"] == "check-version")
    assert step["entrypoint"] == "bash" and step["args"][0] == "-c"
    script = _expand(step["args"][1], _values(_REGION="europe-west1", _TAG=tag))
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)


def test_the_check_passes_when_the_tag_is_the_version(tmp_path: Path) -> None:
    result = _run_check(__version__, tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_check_refuses_a_tag_that_is_not_the_version(tmp_path: Path) -> None:
    result = _run_check("9.9.9", tmp_path)
    assert result.returncode == 1
    assert "not version 9.9.9" in result.stderr and "runonce/__init__.py" in result.stderr
