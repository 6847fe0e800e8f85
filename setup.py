"""Build hook: put the allocator probe's start hook, `oomwatch-probe.pth`, at the top of site-packages.

Everything else about the build is in pyproject.toml. `site` reads a `.pth` file only when it sits
directly in a site directory, which no package-data entry reaches; the root of the wheel does. So
`build_py` copies it to the root of the build tree, and the wheel installs that root into site-packages
(the way coverage.py's subprocess hook is installed). The line costs nothing unless OOMWATCH_PROBE is set
(see daemon/probe/autostart.py).
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "oomwatch-probe.pth"
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "daemon", "probe", PTH)


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(SRC, os.path.join(self.build_lib, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
