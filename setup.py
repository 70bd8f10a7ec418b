"""Package discovery lives here because device_profiles/ (top level) is mapped into the wheel as the package
humming.device_profiles, which automatic discovery does not find; everything else is in pyproject.toml."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["humming", "humming.*"]) + ["humming.device_profiles"])
