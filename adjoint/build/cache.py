"""The on-disk cache of generated modules, and loading a module into the process.

A kernel's first launch on a backend generates the text of its module (the
same text for the same source, adjoint version and target), stores it in the
cache folder under a name that holds a hash of that text, and imports it. It
also writes ``keys/<key>``, one line naming that module, where ``key`` is the
hash of the module's inputs (adjoint/build/inputs.py): a later process with the same
inputs finds the module there (``load_indexed``) without generating its text,
and imports it only if the file still hashes to the name it has.

Expects: the module text in hand (``store`` and ``load`` never trust a file
for what it should say).

Guarantees:

- **Threads and processes.** A file is written to a fresh temporary file in its own
  folder and moved into place with ``os.replace``: a reader sees the old file or the
  whole new one. Importing happens under ``LOCK`` (re-entrant, one per process), and a
  module that fails to run is removed from ``sys.modules`` again, so no thread ever
  gets a half-run module.
- **Repair.** A cached module whose text is not the text it should hold (truncated,
  edited, written by a crashed process) is rewritten before it is imported. numba's
  cache files of a module (``*.nbi``, ``*.nbc``) that are not whole pickles are
  removed, so numba compiles again instead of failing with ``UnpicklingError``.
- Modules are compiled from the verified text itself, never from a ``.pyc``. A module
  found through ``keys/`` is verified against the hash in its own name
  (``text_digest``); an index entry that is damaged, names no module or names one that
  does not verify is ignored, and the caller generates the text and stores it again.
"""
import glob
import hashlib
import importlib.util
import os
import pickletools
import re
import sys
import tempfile
import threading

from ..errors import AdjointError

LOCK = threading.RLock()


def cache_dir():
    """Where generated modules live: ``$ADJOINT_CACHE_DIR`` or ``~/.cache/adjoint``."""
    return os.environ.get("ADJOINT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "adjoint")


def write_atomic(path, text):
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``.

    Raises ``OSError`` when the folder cannot be created or written; the
    temporary file is removed then."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def holds(path, text):
    """Whether the file at ``path`` holds exactly ``text`` (False if it cannot be read)."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read() == text
    except (OSError, UnicodeDecodeError):
        return False


def store(path, text):
    """Make the file at ``path`` hold ``text``, rewriting it if it holds anything else;
    True if it was (re)written."""
    if holds(path, text):
        return False
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise AdjointError(f"cannot write the generated module {path} "
                           f"({exc.strerror or exc}); set ADJOINT_CACHE_DIR to a folder "
                           "you can write") from None
    return True


def import_path(path, modname, text=None):
    """The module ``modname`` run from the file at ``path`` (``text``: its verified
    contents; read from the file when omitted). Imported once per process."""
    with LOCK:
        module = sys.modules.get(modname)
        if module is not None:
            return module
        if text is None:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        code = compile(text, path, "exec", dont_inherit=True)
        sys.modules[modname] = module
        try:
            exec(code, module.__dict__)
        except BaseException:
            sys.modules.pop(modname, None)
            raise
        repair_numba_cache(module, path)
        return module


def load(folder, stem, text, modname):
    """Store ``text`` as ``folder/stem.py`` (repairing what is there) and import it as
    ``modname``."""
    path = os.path.join(folder, f"{stem}.py")
    with LOCK:
        if modname not in sys.modules:
            store(path, text)
        return import_path(path, modname, text)


def text_digest(text):
    """The hash of a module's text that its file name holds (16 hex digits)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def module_stem(name, text):
    """The file name (without ``.py``) of the generated module ``text`` whose first
    kernel or func is ``name``."""
    return f"adjoint_gen_{name}_{text_digest(text)}"


def _index_path(folder, key):
    return os.path.join(folder, "keys", key)


def remember(folder, key, stem):
    """Record that the module of inputs ``key`` is ``folder/stem.py``; a folder that
    cannot be written only costs the next process the transformer."""
    try:
        write_atomic(_index_path(folder, key), stem + "\n")
    except OSError:
        pass


def load_indexed(folder, key, name, suffix):
    """The module ``keys/<key>`` names, imported as ``<stem>_<suffix>``, or None: no
    entry, a damaged one, or a module file whose text does not hash to its name."""
    try:
        with open(_index_path(folder, key), encoding="utf-8") as fh:
            line = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    found = re.fullmatch(rf"(adjoint_gen_{re.escape(name)}_([0-9a-f]{{16}}))\n", line)
    if found is None:
        return None
    stem, digest = found.groups()
    modname = f"{stem}_{suffix}"
    path = os.path.join(folder, f"{stem}.py")
    with LOCK:
        module = sys.modules.get(modname)
        if module is not None:
            return module
        try:
            with open(path, encoding="utf-8", newline="") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError):
            return None
        if text_digest(text) != digest:
            return None
        return import_path(path, modname, text)


def _whole_pickles(path, count):
    """Whether the file at ``path`` is exactly ``count`` complete pickles (read, not run)."""
    try:
        with open(path, "rb") as fh:
            for _ in range(count):
                for _op in pickletools.genops(fh):
                    pass
            return fh.read(1) == b""
    except FileNotFoundError:
        return True             # removed meanwhile by numba or another process: nothing to do
    except Exception:  # noqa: BLE001 - whatever a damaged pickle raises, the file is bad
        return False


def _numba_cache_folders(module):
    """Folders where numba caches the compiled functions of ``module``."""
    folders = set()
    for obj in vars(module).values():
        folder = getattr(getattr(obj, "_cache", None), "cache_path", None)
        if isinstance(folder, str):
            folders.add(folder)
    return folders


def repair_numba_cache(module, path):
    """Remove numba's cache files of the module at ``path`` that are not whole pickles.

    An index (``.nbi``: numba's version, then the index) is two pickles; a data
    file (``.nbc``) is one. A bad index goes with its data files."""
    stem = os.path.splitext(os.path.basename(path))[0]
    for folder in _numba_cache_folders(module):
        pattern = os.path.join(glob.escape(folder), glob.escape(stem))
        for index in glob.glob(pattern + ".*.nbi"):
            if not _whole_pickles(index, 2):
                base = index[:-len(".nbi")]
                for bad in [index] + glob.glob(glob.escape(base) + ".*.nbc"):
                    _remove(bad)
        for data in glob.glob(pattern + ".*.nbc"):
            if not _whole_pickles(data, 1):
                _remove(data)


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
