"""DataLoader workers pass large tensors through /dev/shm."""
import torch
from torch.utils.data import DataLoader, Dataset


class Big(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.zeros(4 * 1024 * 1024)  # 16 MiB per sample


for _batch in DataLoader(Big(), batch_size=4, num_workers=2):
    pass
print("ok")
