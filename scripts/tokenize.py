#!/usr/bin/env python3
"""Text in: documents -> pipefill's input HDF5 (scripts/tokenize.py --help). The tool is
scripts/text_to_prompts.py; this file only starts it.

Why two files: Python puts a script's folder first on its module path, so every Python script
in scripts/ that imports the standard library's `tokenize` (inspect, linecache, dataclasses and
logging do) would import this file instead. Imported under that name, this file therefore loads
the standard library's module in its own place; run as a script, it hands over to the tool.
"""
import os
import sys

if __name__ == "__main__":
    tool = os.path.join(os.path.dirname(os.path.realpath(__file__)), "text_to_prompts.py")
    os.execv(sys.executable, [sys.executable, tool] + sys.argv[1:])
else:
    import importlib.util
    import sysconfig

    _spec = importlib.util.spec_from_file_location(__name__, os.path.join(sysconfig.get_path("stdlib"), "tokenize.py"))
    _stdlib_tokenize = importlib.util.module_from_spec(_spec)
    sys.modules[__name__] = _stdlib_tokenize
    _spec.loader.exec_module(_stdlib_tokenize)
