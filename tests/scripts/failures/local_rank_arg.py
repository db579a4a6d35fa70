"""The guides' script: takes --local_rank as a required argument (torchrun passes none)."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, required=True)
args = parser.parse_args()
print("local rank", args.local_rank)
