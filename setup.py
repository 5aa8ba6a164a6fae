"""setuptools: the five parts live at the repository root (the design's folders: core/, serving/,
aggregate/, simulate/, interventions/) and install under the one import root, ``chorus.*``
(``chorus.core``, ``chorus.serving``, ...), beside the application in chorus/. Everything else is in
pyproject.toml; this file only says where each package's folder is, which pyproject cannot for a
package found by search."""
from setuptools import find_namespace_packages, setup

PARTS = ("core", "serving", "aggregate", "simulate", "interventions")
SKIP = ["*__pycache__*"]

packages = find_namespace_packages(include=["chorus", "chorus.*"], exclude=SKIP)
for part in PARTS:
    packages += [f"chorus.{p}" for p in find_namespace_packages(include=[part, f"{part}.*"], exclude=SKIP)]

setup(packages=packages, package_dir={"chorus": "chorus", **{f"chorus.{part}": part for part in PARTS}})
