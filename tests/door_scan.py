"""The source scan behind ``test_one_door.py``: every call in the package that opens or reads a file by its path,
outside ``mlharness/fileguard.py`` (the one door: regular files only, opened non-blocking, bounded).

A call is a reader when it is the builtin ``open``, a ``.open(...)`` method (``Path.open``, ``Image.open``,
``tarfile.open``, ``gzip.open``, ``os.open``) or ``.read_text()``/``.read_bytes()``, in a reading mode, or one of
the library loaders in :data:`LOADERS`. Writing modes (``"w"``, ``"a"``, ``"x"`` without ``"+"``) are not
readers; a mode that is not a literal counts as reading, since the scan cannot tell.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

LOADERS = {
    "np.load", "numpy.load", "np.fromfile", "numpy.fromfile", "np.loadtxt", "numpy.loadtxt", "np.genfromtxt",
    "np.memmap", "numpy.memmap", "torch.load", "pickle.load", "json.load", "orjson.loads_file", "pq.read_table",
    "pq.ParquetFile", "pyarrow.parquet.read_table", "sf.read", "soundfile.read", "sf.SoundFile", "cv2.imread",
    "safe_open", "load_file", "safetensors.torch.load_file", "torchaudio.load", "librosa.load", "imageio.imread",
    "iio.imread", "h5py.File", "zipfile.ZipFile", "ZipFile",
}
_MODULES_WITH_MODE = {"Image", "tarfile", "gzip", "bz2", "lzma", "io", "codecs", "wave"}
LOADER_PREFIXES = ("pd.read_", "pandas.read_")
READ_METHODS = {"read_text", "read_bytes"}


@dataclass(frozen=True)
class Hit:
    path: str  # relative to the scanned root's parent, e.g. mlharness/tasks/x.py
    function: str  # the enclosing function's qualified name, or "<module>"
    line: int
    call: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.function}: {self.call}"


def _mode(node: ast.Call, position: int) -> str | None:
    """The literal mode of an open call, '' when none is given (reading), None when it is not a literal."""
    for kw in node.keywords:
        if kw.arg == "mode":
            return kw.value.value if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str) else None
    if len(node.args) > position:
        arg = node.args[position]
        return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
    return ""


def _writes(mode: str | None) -> bool:
    return mode is not None and "+" not in mode and any(c in mode for c in "wax")


def _in_memory(node: ast.Call) -> bool:
    """Reads bytes already in memory (``Image.open(io.BytesIO(data))``, ``tarfile.open(fileobj=...)``)."""
    if any(kw.arg == "fileobj" for kw in node.keywords):
        return True
    first = node.args[0] if node.args else None
    return isinstance(first, ast.Call) and ast.unparse(first.func).endswith(("BytesIO", "StringIO"))


def _os_open_writes(node: ast.Call) -> bool:
    flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
    return any(flag in flags for flag in ("O_WRONLY", "O_CREAT", "O_TMPFILE"))


def is_reader(node: ast.Call) -> bool:
    f = node.func
    dotted = ast.unparse(f)
    if _in_memory(node):
        return False
    if isinstance(f, ast.Name) and f.id == "open":
        return not _writes(_mode(node, 1))
    if isinstance(f, ast.Attribute):
        if f.attr in READ_METHODS:
            return True
        if f.attr == "open":
            receiver = ast.unparse(f.value)
            if receiver == "os":  # os.open(path, flags): flags, not a mode
                return not _os_open_writes(node)
            if receiver == "webbrowser":
                return False
            # Path(...).open(mode); Image.open(fp, mode); tarfile.open(name, mode); gzip.open(name, mode)
            position = 1 if receiver in _MODULES_WITH_MODE else 0
            return not _writes(_mode(node, position))
    return dotted in LOADERS or dotted.startswith(LOADER_PREFIXES)


class _Visitor(ast.NodeVisitor):
    def __init__(self, rel: str):
        self.rel = rel
        self.stack: list[str] = []
        self.hits: list[Hit] = []

    def _scope(self, node: ast.AST) -> None:
        self.stack.append(node.name)  # type: ignore[attr-defined]
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def visit_Call(self, node: ast.Call) -> None:
        if is_reader(node):
            self.hits.append(Hit(self.rel, ".".join(self.stack) or "<module>", node.lineno,
                                 ast.unparse(node)[:120]))
        self.generic_visit(node)


def scan(package: Path, door: str = "fileguard.py") -> list[Hit]:
    """Every reader call in the package's modules but the door's."""
    hits: list[Hit] = []
    for module in sorted(package.rglob("*.py")):
        if module.name == door and module.parent == package:
            continue
        rel = module.relative_to(package.parent).as_posix()
        visitor = _Visitor(rel)
        visitor.visit(ast.parse(module.read_text(encoding="utf-8"), filename=str(module)))
        hits.extend(visitor.hits)
    return hits
