"""The package's shape, checked from its source text (ast; nothing is imported or run).

- no import cycles between bertkit's modules, counting imports inside functions too: a cycle
  means two modules share a concern and neither can be read alone;
- Hugging Face's key names appear only in `bertkit/hf.py` and the family tables it applies
  (`bertkit/families/`);
- files stay under 400 lines and functions under 60, as ../shared/STYLE.md asks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "bertkit"
HF_KEY = re.compile(r"""["'](bert\.|cls\.predictions|cls\.seq_relationship|qa_outputs|classifier\.|electra\.|"""
                    r"""generator_predictions|generator_lm_head|discriminator_predictions|embeddings_project|"""
                    r"""roberta\.|lm_head\.|distilbert\.|vocab_projector|albert\.|sop_classifier|deberta\.|"""
                    r"""lm_predictions|pre_classifier|rel_embeddings|tok_embeddings|Wqkv)""")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the bertkit modules it imports (at any depth of its code)."""
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                found |= {base} | {f"{base}.{a.name}" for a in node.names}
        # A package's __init__ re-exporting its own modules is not a cycle.
        graph[name] = {m for m in found if m in modules and m != name and not name.startswith(m + ".")}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_bertkit():
    cycles = find_cycles(import_graph(_modules()))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_hf_key_names_only_in_hf_py():
    leaks = [f"{path.relative_to(PACKAGE)}:{number}"
             for path in _modules().values()
             if (path.name != "hf.py" or path.parent != PACKAGE) and path.parent.name != "families"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if HF_KEY.search(line)]
    assert not leaks, f"HF key names outside hf.py: {', '.join(leaks)}"


def test_files_and_functions_stay_short():
    long_files, long_functions = [], []
    for path in _modules().values():
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > 400:
            long_files.append(f"{path.relative_to(PACKAGE)} ({len(text.splitlines())} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    long_functions.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({length} lines)")
    assert not long_files and not long_functions, f"too long: {long_files + long_functions}"
