import json
import os
import sys

print(json.dumps({"name": __name__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "file": __file__}))
