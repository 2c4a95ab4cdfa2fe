#!/usr/bin/env python3
"""The structure issue 29 asks for, checked on the sources (not the build):

- core's messages name concepts, not command-line flags: no string literal in core/ holds "--x"
  (each front end adds its own flag or keyword name, once);
- the front ends ask ModelInfo::diffusion(), not which DecodingKind: `DecodingKind::` appears in
  apps/ at most once;
- no plugin compiles another plugin's sources: a CMakeLists.txt under backends/, hooks/ or plugins/
  names no source or folder of a sibling (shared code is a library: plugins/common, hooks/h5util),
  and no source there includes another folder's file by a relative path ("../hdf5/h5_handles.h");
- capture policy stays out of the model plugins: none includes <sonde/capture.h>;
- core asks for no sink plugin by a literal name (`.sink("hdf5")`): it finds an array reader by what
  the reader reads (array_reader_for), the sinks a run opens by the names the run is given;
- score and lens are run kinds of core's run layer: cmd_score.cpp and cmd_lens.cpp open no sink,
  build no metadata and write no file themselves (no sink registry, RunMetadata, SinkOptions,
  write_array, run_config or file stream).

usage: check_structure.py SOURCE_DIR   (exit 1 listing each breach)
"""
import re
import sys
from pathlib import Path


def string_literals(text: str):
    """(line, literal body) of each "..." literal outside comments; raw strings are rare here and
    read as ordinary ones."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            i = j
            continue
        if c == "'":  # a char literal, or a digit separator (1'000): skip to its close on this line
            m = re.match(r"'(\\.|[^'\\\n])'", text[i:])
            i += len(m.group(0)) if m else 1
            continue
        if c == '"':
            j, body = i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    body.append(text[j:j + 2])
                    j += 2
                    continue
                body.append(text[j])
                j += 1
            yield line, "".join(body)
            i = j + 1
            continue
        i += 1


def main() -> int:
    root = Path(sys.argv[1])
    breaches = []

    flag = re.compile(r"(^|[^-\w])--[a-z]")
    for path in sorted((root / "core").rglob("*")):
        if path.suffix not in (".cpp", ".h"):
            continue
        for line, lit in string_literals(path.read_text(encoding="utf-8")):
            if flag.search(lit):
                breaches.append(f"{path.relative_to(root)}:{line}: a core message names a flag: \"{lit}\"")

    uses = [f"{p.relative_to(root)}:{i}" for p in sorted((root / "apps").rglob("*"))
            if p.suffix in (".cpp", ".h") for i, l in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if "DecodingKind::" in l]
    if len(uses) > 1:
        breaches.append(f"DecodingKind:: appears {len(uses)} times in apps/ (at most once): {', '.join(uses)}")

    for top in ("backends", "hooks", "plugins"):
        for cm in sorted((root / top).glob("*/CMakeLists.txt")):
            own = cm.parent.name
            for i, l in enumerate(cm.read_text(encoding="utf-8").splitlines(), 1):
                code = l.split("#", 1)[0]
                for m in re.finditer(r"\$\{PROJECT_SOURCE_DIR\}/(backends|hooks|plugins)/([\w-]+)/\S+\.(cpp|c)\b", code):
                    if m.group(2) != own:
                        breaches.append(f"{cm.relative_to(root)}:{i}: plugin '{own}' compiles {m.group(1)}/{m.group(2)}'s source")
                # Nor reaches into a sibling's folder another way (a relative path, an include
                # directory): what two plugins share is a library they both link.
                for m in re.finditer(r"(?:\$\{(?:CMAKE_SOURCE_DIR|PROJECT_SOURCE_DIR|CMAKE_CURRENT_SOURCE_DIR)\}/)?\.\./([\w-]+)|"
                                     r"\$\{(?:CMAKE_SOURCE_DIR|PROJECT_SOURCE_DIR)\}/(?:backends|hooks|plugins)/([\w-]+)", code):
                    other = m.group(1) or m.group(2)
                    if other != own and not m.group(0).endswith((".cpp", ".c")):
                        breaches.append(f"{cm.relative_to(root)}:{i}: plugin '{own}' names {other}'s folder: share a library instead")
        for src in sorted((root / top).rglob("*")):
            if src.suffix in (".cpp", ".h") and re.search(r'#include\s+"\.\./', src.read_text(encoding="utf-8")):
                breaches.append(f"{src.relative_to(root)}: includes a file of another folder by a relative path")

    for src in sorted((root / "plugins").rglob("*")):
        if src.suffix in (".cpp", ".h") and "<sonde/capture.h>" in src.read_text(encoding="utf-8"):
            breaches.append(f"{src.relative_to(root)}: a model plugin includes <sonde/capture.h>")

    by_name = re.compile(r"\.sink\(\s*\"")  # (the reference backend is the executor's fallback by design)
    for path in sorted((root / "core" / "src").rglob("*.cpp")):
        for i, l in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if by_name.search(l.split("//", 1)[0]):
                breaches.append(f"{path.relative_to(root)}:{i}: core asks for a sink plugin by a literal name")

    own_outputs = re.compile(r"PluginRegistry|RunMetadata|SinkOptions|<sonde/sink\.h>|<sonde/registry\.h>|write_array|"
                             r"output_metadata|run_config|ofstream|->open\(|sha256")
    for name in ("cmd_score.cpp", "cmd_lens.cpp"):
        src = root / "apps" / "sonde" / name
        for i, l in enumerate(src.read_text(encoding="utf-8").splitlines(), 1):
            m = own_outputs.search(l.split("//", 1)[0])
            if m:
                breaches.append(f"apps/sonde/{name}:{i}: opens a sink or builds metadata itself ({m.group(0)}): the run layer does")

    for b in breaches:
        print(b)
    print(f"check_structure: {len(breaches)} breach(es)")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
