"""Destroys its one-rank gloo group as a script's main() does; prints whether
destroy_process_group was pardash's (it gives gloo's threads the GIL first) and the group after."""

import json

import torch.distributed as dist
from torch.distributed import destroy_process_group


def main() -> None:
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    before = dist.is_initialized()
    destroy_process_group()
    print(json.dumps({"settles": hasattr(dist.destroy_process_group, "__wrapped__"), "same": destroy_process_group is dist.destroy_process_group,
                      "before": before, "after": dist.is_initialized()}))  # fmt: skip


if __name__ == "__main__":
    main()
