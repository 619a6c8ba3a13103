"""pyproject.toml is the single source of versions; environment.yml must mirror it."""

import tomllib

import yaml


def test_environment_yml_mirrors_pyproject(repo):
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((repo / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    mirrored = {line for line in pip if not line.startswith("-e")}
    assert mirrored == set(project["dependencies"])
    assert "-e ." in pip, "the conda environment must install the package itself"
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert python.split("=")[1] >= project["requires-python"].lstrip(">=")


def test_required_pins(repo):
    deps = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split("==")[0].lower(): d.split("==")[1] for d in deps}
    assert names["torch"].startswith("2.14.") and names["torchvision"].startswith("0.29.")
    assert names["snakemake"].startswith("9.") and tuple(map(int, names["snakemake"].split(".")[:2])) >= (9, 20)
    assert names["fabric"].startswith("3.")
    assert "decord2" in names and "pyzmq" in names and "av" in names
