"""The two wings: the engine flat in code/, the shell in its folders, and the engine alone behind
`import main`."""

import ast
import subprocess
import sys

from conftest import ROOT

CODE = ROOT / "code"
SHELL_FOLDERS = {"commands", "reports", "traces"}
DATA_FOLDERS = {"models"}  # config.json files read by presets.py: data, not a package
MAX_ENGINE_MODULES = 29    # 18, the models' three (model_config, moe, mla), engine_overhead,
#                            async_scheduling, the speed room's bulk_scheduler and decode_runs,
#                            the RunRecorder split's engine_counters, and the many engines' three
#                            (cluster, router, disaggregation)


def engine_modules() -> list[str]:
    return sorted(path.stem for path in CODE.glob("*.py"))


def imported_roots(path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_code_holds_the_engine_and_the_shell_folders_only():
    folders = {path.name for path in CODE.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert folders == SHELL_FOLDERS | DATA_FOLDERS
    for folder in DATA_FOLDERS:
        names = {path.suffix or path.name for path in (CODE / folder).iterdir()}
        assert names <= {".json", ".md"}, names  # no code, no __init__.py
    assert "main" in engine_modules() and len(engine_modules()) <= MAX_ENGINE_MODULES
    assert not (CODE / "__init__.py").exists()  # `code` must stay the standard library's module
    for folder in SHELL_FOLDERS:
        assert (CODE / folder / "__init__.py").read_text() == ""


def test_no_module_or_folder_is_named_like_a_standard_library_module():
    names = {path.stem for path in CODE.rglob("*.py")} | SHELL_FOLDERS | DATA_FOLDERS
    assert not names & (set(sys.stdlib_module_names) - {"__init__"})


def test_no_engine_module_imports_from_the_shell():
    for module in engine_modules():
        shell = imported_roots(CODE / f"{module}.py") & SHELL_FOLDERS
        if module == "main":  # its __main__ block hands argv to the command line, and only that
            assert shell == {"commands"}
            continue
        assert not shell, f"code/{module}.py imports {shell}"


def test_import_main_loads_the_engine_alone():
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import main; "
             "print(' '.join(sorted(name for name, module in sys.modules.items() "
             "if (getattr(module, '__file__', None) or '').startswith(sys.argv[1]))))")
    loaded = subprocess.run([sys.executable, "-c", probe, str(CODE)], capture_output=True,
                            text=True, check=True).stdout.split()
    assert "main" in loaded
    assert set(loaded) <= set(engine_modules()), set(loaded) - set(engine_modules())


# Test files named after no one module: they test what every command or document shares.
ACROSS_MODULES = {
    "bad_input": "the catalogue of careless input, every command",
    "hostile_input": "the catalogue of hostile input, every command",
    "fuzz": "random configurations and command lines, every mode",
    "fresh_clone": "every command the docs show, in a copy of the repository",
    "readme": "every pasted output of every document",
    "readme_commands": "every other command the docs show",
    "reading_map": "README's map of the lesson's sections",
    "layout": "this file: the folders and the imports",
    "lesson_orderings": "the lesson's orderings, out of the whole model",
    "papercuts": "what a new learner trips on first, across commands",
    "prefix_caching": "prefix caching, which kv_cache.py and block_pool.py share",
    "prefix_caching_oracle": "the same, against vLLM's recorded scheduler",
}


def test_each_test_file_is_named_after_the_module_it_tests():
    """tests/test_M.py (or test_M_ASPECT.py) tests code/M.py, or code/FOLDER/M.py, whose tests
    are test_M or, for traces/, test_trace_M; the rest are listed above, each with what it
    covers."""
    modules = set()
    for path in CODE.rglob("*.py"):
        if path.stem != "__init__":
            modules.add("trace_" + path.stem if path.parent.name == "traces" else path.stem)
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        name = path.stem[len("test_"):]
        named = name in ACROSS_MODULES or any(name == module or name.startswith(module + "_")
                                              for module in modules)
        assert named, f"{path.name} names no module of code/ (nor is it in ACROSS_MODULES)"
