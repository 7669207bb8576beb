"""Write the gateway's /openapi.json to console/openapi.json (the console's API types are
generated from it: `npm run gen`). No server is started: the document is the app's own."""

import json
import sys
from pathlib import Path

from loam_gateway.app import create_app
from loam_gateway.routing import Router

out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "openapi.json")
app = create_app(Router(cores=["http://127.0.0.1:1"]))
app = getattr(app, "app", app)  # under tracing the FastAPI app is wrapped
out.write_text(json.dumps(app.openapi(), indent=1, sort_keys=True) + "\n")
