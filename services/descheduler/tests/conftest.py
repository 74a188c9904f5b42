import sys
from pathlib import Path

# Tests import their builders as `desched_scenario` (pytest runs with --import-mode=importlib).
sys.path.insert(0, str(Path(__file__).parent))
