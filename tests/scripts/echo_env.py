"""Print the variables a test asks about (ENV_NAMES, comma-separated) as NAME=value|<unset>."""
import os

for name in os.environ.get("ENV_NAMES", "").split(","):
    print(f"ENV {os.environ.get('RANK')} {name}={os.environ.get(name, '<unset>')}", flush=True)
