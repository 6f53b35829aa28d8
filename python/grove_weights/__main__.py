"""python3 -m grove_weights convert STATE_DICT.pt OUT.safetensors [--model MODEL.json]"""
import argparse
import sys

import grove_weights


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m grove_weights")
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("convert", help="a torch.save()d state_dict to safetensors")
    convert.add_argument("state_dict")
    convert.add_argument("out")
    convert.add_argument("--model", help="a grove model JSON to check the names against")
    args = parser.parse_args(argv)
    import torch
    state_dict = torch.load(args.state_dict, map_location="cpu")
    if args.model:
        grove_weights.check_against_model(state_dict, args.model)
    grove_weights.save_state_dict(state_dict, args.out)
    print(f"wrote {len(state_dict)} tensors to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
