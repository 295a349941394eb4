#!/usr/bin/env python3
"""The house rule of core/ and models/: each folder's rooms form floors, a room including only rooms
below it.

  check_layers.py SOURCE_DIR FOLDER:ROOM,ROOM,... [FOLDER:ROOM,...]

FOLDER:ROOMS lists a folder's rooms ground floor first (TANDEM_CORE_ROOMS and TANDEM_MODEL_ROOMS in
CMakeLists.txt). Fails (exit 1) naming the file, line and arrow for every `#include "FOLDER/<room>/..."`
that runs from a room to one listed after it, and for a room folder missing from the list (files directly
in FOLDER/ are its ground, below every room). First it checks itself on a small tree with one upward
include, which must be caught (the control).
"""
import re
import sys
import tempfile
from pathlib import Path


def violations(root, folder, rooms):
    order = {room: i for i, room in enumerate(rooms)}
    include = re.compile(r'^\s*#\s*include\s+"' + re.escape(folder) + r'/([A-Za-z0-9_]+)/')
    found = []
    top = Path(root) / folder
    for sub in sorted(p for p in top.iterdir() if p.is_dir()):
        if sub.name not in order:
            found.append(f"{folder}/{sub.name}/ is not among {folder}/'s rooms: give it its floor in CMakeLists.txt")
    for path in sorted(top.rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        parts = path.relative_to(top).parts
        room = parts[0] if len(parts) > 1 else None  # None: the folder's ground (its own files)
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = include.match(line)
            if not m:
                continue
            to = m.group(1)
            where = f"{path.relative_to(root)}:{n}"
            if to not in order:
                found.append(f"{where}: includes {folder}/{to}/, which is no room")
            elif room is None and len(parts) == 1:
                found.append(f"{where}: {folder}/'s own files are its ground and include no room ({to}/)")
            elif room in order and order[to] > order[room]:
                found.append(f"{where}: {folder}/{room}/ includes {to}/, a room above it")
    return found


def control():
    with tempfile.TemporaryDirectory() as d:
        for room, text in (("low", '#include "core/high/b.h"\n'), ("high", '#include "core/low/a.h"\n')):
            (Path(d) / "core" / room).mkdir(parents=True)
            (Path(d) / "core" / room / "x.cpp").write_text(text)
        found = violations(d, "core", ["low", "high"])
        return len(found) == 1 and "core/low/ includes high/" in found[0]


def main():
    root, specs = sys.argv[1], sys.argv[2:]
    if not control():
        print("FAIL control: an upward include in a test tree was not caught")
        return 1
    print("ok   control: an upward include in a test tree is caught")
    failed = False
    for spec in specs:
        folder, rooms = spec.split(":", 1)
        rooms = [r for r in rooms.replace(";", ",").split(",") if r]
        found = violations(root, folder, rooms)
        for v in found:
            print("FAIL " + v)
        if not found:
            print(f"ok   {folder}/ rooms one way: {' < '.join(rooms)}")
        failed = failed or bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
