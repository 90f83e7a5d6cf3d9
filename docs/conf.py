"""Sphinx configuration for pyg_orch."""
import os
import sys

sys.path.insert(0, os.path.abspath('..'))

import pyg_orch  # noqa: E402

project = 'pyg_orch'
author = 'pyg_orch developers'
copyright = '2026, pyg_orch developers'
version = pyg_orch.__version__
release = pyg_orch.__version__

extensions = [
    'sphinx.ext.autodoc',
    'sphinx.ext.napoleon',  # PyG-style "Args:" / "Returns:" sections.
    'sphinx.ext.mathjax',
    'sphinx.ext.viewcode',
]

# Docstrings follow PyG's conventions: reST with Google-style sections.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

autodoc_member_order = 'bysource'
autodoc_typehints = 'none'  # Types are given in the "Args:" sections.
autodoc_inherit_docstrings = False
autodoc_default_options = {
    'undoc-members': False,
    'show-inheritance': False,
}

nitpicky = False
exclude_patterns = ['_build']
templates_path = []
html_static_path = []
html_theme = 'alabaster'
html_title = f'pyg_orch {release}'
