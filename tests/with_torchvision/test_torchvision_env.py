"""The second venv (Makefile TVENV) holds torch and torchvision built for each other: the readers that
import torchvision (Mosaic MDS, litdata) and the torchvision loader profile are tested there."""

import torch
import torchvision


def test_torchvision_matches_torch():
    # A torchvision built for another torch fails on its first operator ('torchvision::nms does not exist')
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [50.0, 50.0, 60.0, 60.0]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    keep = torchvision.ops.nms(boxes, scores, 0.5)
    assert keep.tolist() == [0, 2]
