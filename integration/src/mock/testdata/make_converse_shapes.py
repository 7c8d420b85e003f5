"""The request shapes of Bedrock's Converse and ConverseStream from botocore's service model for
bedrock-runtime, for integration/src/mock/converse.rs, which validates every Converse body against
them as strictly as AWS (unknown members, missing required members, unions with other than one
member, enums). Only what validation needs is kept: each shape's type, members (name -> shape),
required members, union flag, document flag (any JSON), list member, map value, enum. The `modelId` URI member is left out
of the body shapes (the path carries it). Regenerate with

    .venv/bin/python integration/src/mock/testdata/make_converse_shapes.py \
        > integration/src/mock/testdata/converse_shapes.json
"""
import gzip
import json
import pathlib
import sys

import botocore

root = pathlib.Path(botocore.__file__).parent / "data" / "bedrock-runtime"
model = json.load(gzip.open(sorted(root.glob("*/service-2.json.gz"))[-1]))
shapes = model["shapes"]
out = {}


def keep(name):
    if name in out:
        return
    s = shapes[name]
    k = {"type": s["type"]}
    out[name] = k
    if s.get("document"):
        k["document"] = True
    elif s["type"] == "structure":
        members = {m: v["shape"] for m, v in s.get("members", {}).items() if v.get("location") != "uri"}
        k["members"] = members
        k["required"] = [r for r in s.get("required", []) if r in members]
        if s.get("union"):
            k["union"] = True
        for v in members.values():
            keep(v)
    elif s["type"] == "list":
        k["member"] = s["member"]["shape"]
        keep(k["member"])
    elif s["type"] == "map":
        k["value"] = s["value"]["shape"]
        keep(k["value"])
    elif "enum" in s:
        k["enum"] = s["enum"]
    if "min" in s:
        k["min"] = s["min"]


for op in ("Converse", "ConverseStream"):
    keep(model["operations"][op]["input"]["shape"])
json.dump({"api_version": model["metadata"]["apiVersion"], "shapes": out}, sys.stdout, indent=0, sort_keys=True)
sys.stdout.write("\n")
