"""chorus: self-hosted LLM agents that debate, simulate opinions and deliberate.

One import root. The parts: ``chorus.core`` (the shared base), ``chorus.serving`` (engines, model
profiles, call store), ``chorus.simulate`` (belief layer, debates, councils, role-play),
``chorus.aggregate`` (BDA over council traces) and ``chorus.interventions`` (readouts, ablations,
knockout, patching, probes). The application sits on top of them in this folder: the ``chorus``
CLI (``chorus.cli``), the demo (``chorus.demo`` running the stages of ``chorus.stages``) and the
HTML report (``chorus.report``), and the Python front door (``chorus.api``: ``chorus.run``,
``chorus.open_run``, ``chorus.get_model``, ``chorus.verbs``).
"""
from pathlib import Path

# The parts' folders sit at the repository root beside this one (core/, serving/, ...); an install
# puts them inside this package (setup.py maps them). In a source checkout that is not installed
# (a bench script, a tree on PYTHONPATH, the bare GPU check on a lent machine) the root is searched
# too, after this folder, so ``chorus.core`` is the root's core/ there as well.
_root = Path(__file__).resolve().parent.parent
if not (Path(__file__).parent / "core").is_dir() and (_root / "core" / "__init__.py").is_file() \
        and (_root / "setup.py").is_file():
    __path__.append(str(_root))
del _root

from chorus.core import __version__  # noqa: E402  one version, kept in the base
from chorus.core.lazy import lazy_getattr  # noqa: E402

# the Python front door (chorus/api.py), imported on first use so ``import chorus.core`` stays light
_EXPORTS = {"run": "api", "open_run": "api", "Run": "api", "get_model": "api", "verbs": "api"}
__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())

__all__ = ["__version__", *_EXPORTS]
