"""Parse every `.tf` file under the given directories with python-hcl2 and print {path: tree} as JSON.

Runs in the deploy tools' own venv (python-hcl2 and checkov's fork both install a module named
`hcl2`, so they cannot share one), and the tests read its output.
"""

import json
import sys
from pathlib import Path

import hcl2

trees = {}
for root in sys.argv[1:]:
    for path in sorted(Path(root).rglob("*.tf")):
        if ".terraform" in path.parts:
            continue
        with path.open(encoding="utf-8") as handle:
            trees[str(path)] = hcl2.load(handle)
json.dump(trees, sys.stdout)
