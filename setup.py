"""Maps the repository's top-level rooms into the one import name `optistudio`.

core/, db/, workers/, studio/ and migrations/ stay at the top of the repository (the layout people
read); installed, wheel and editable alike, they are `optistudio.core`, `optistudio.db`, ... and
`optistudio` is the only top-level name in site-packages. Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

ROOMS = ("core", "db", "workers", "studio", "migrations")

package_dir = {"optistudio": "optistudio"}
packages = ["optistudio", *(f"optistudio.{p}" for p in find_packages("optistudio"))]
for room in ROOMS:
    package_dir[f"optistudio.{room}"] = room
    packages += [f"optistudio.{room}", *(f"optistudio.{room}.{p}" for p in find_packages(room))]

setup(package_dir=package_dir, packages=packages)
