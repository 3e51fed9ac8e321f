#!/usr/bin/env python3
"""Train a CIFAR-10 classifier with tinygrad_lite, on airbench94's recipe, and report its test accuracy.

    python train_cifar.py                        # downloads CIFAR-10 into ./data, trains 12 epochs, tests
    python train_cifar.py --data DIR --seed 3 --log run.jsonl --save ckpt.npz
    python train_cifar.py --synthetic --device cpu --epochs 1 --train-limit 512     # a quick timing run

The recipe is airbench94's (K. Jordan, arXiv 2404.00498), written here with tinygrad_lite's layers:
- a fixed 2x2 conv (3 -> 24) whose filters are the 12 eigenvectors of the covariance of the 2x2 patches
  of 5,000 training images, each divided by sqrt(eigenvalue + 5e-4), and their negatives; its bias (from 0)
  trains for the first 3 epochs only; then GELU;
- three blocks of conv3x3 -> max-pool 2 -> BatchNorm -> GELU -> conv3x3 -> BatchNorm -> GELU at widths
  64/256/256; convs without bias, Dirac-initialised on their first C_in filters; BatchNorm with its scale
  fixed at 1 (only the shift trains), eps 1e-12, momentum 0.4;
- a 3x3 max-pool over what is left (global), a linear layer 256 -> 10 without bias, logits times 1/9;
- batch 1024; the cross-entropy summed over the batch, label smoothing 0.2; Nesterov SGD, momentum 0.85,
  lr 11.5 and weight decay 0.0153 per 1024 examples: lr / (1024 (1 + 1/(1 - momentum))) per example,
  decay 0.0153 * batch / (1024 (1 + 1/(1 - momentum))) per step, both times the schedule; BatchNorm shifts
  at 64x that lr with the same decay; the schedule per step rises linearly 0.2 -> 1 over the first 23% of
  steps and falls linearly to 0.07 at the end;
- Lookahead: every 5 steps an average trailing the weights (and BatchNorm statistics) moves toward them by
  1 - 0.95^5 (t/T)^3 and the weights are set to it; the final weights are the average;
- augmentation on the device, in one gather per batch: a random translation of up to 2 pixels (reflect
  padding) drawn anew each epoch, and alternating flip: each image mirrored at random in epoch 1 and the
  other way in every even-numbered epoch;
- test-time augmentation (--tta on): logits averaged over the image and its mirror (weight 1/2) and
  over both of those shifted one pixel up-left and down-right (weight 1/2), as airbench's level 2.
Channels-last memory, as airbench's: on the GPU tinygrad_lite's convs give NCHW-shaped tensors in channels-last
memory, which its pooling, BatchNorm and elementwise kernels read as they are.

Each epoch reports the training loss and accuracy (on the augmented batches it trained on). The held-back
split (test_batch) is read only once training has ended, for the final evaluation: a run that --stop-after
ends before the end of the schedule does not test (--resume its checkpoint to finish and test). To choose
settings (epochs, lr, ...) without looking at test_batch, --val N holds the last N training images back and
evaluates on them instead; such a run never reads test_batch.

Float16 activations on the GPU with float32 master weights (each weight is cast to float16 as the forward
pass reads it; BatchNorm statistics and the loss are computed in float32). All randomness of training
(order, translations, flips) comes from one seeded NumPy generator saved in checkpoints, so --resume
continues exactly where an uninterrupted run would be. Timing: the training time counts the whitening
filters' computation (on the device) and the training steps, as airbench's does; data loading, evaluation
and the warm-up (a few throwaway steps on the GPU that compile kernels and fill caches) are reported
apart (airbench's total also counts its final, test-time-augmented evaluation: add the two to compare).
"""
import argparse
import contextlib
import hashlib
import json
import math
import os
import pickle
import re
import sys
import tarfile
import tempfile
import time
import urllib.request

import numpy as np
from tqdm import tqdm

import tinygrad_lite as tl

URL = 'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz'
MD5 = 'c58f30108f718f92721af3b95e74349a'
# CIFAR-10's published channel statistics, in pixel units: fixed numbers, read from no split here (they were taken over
# its 50,000 training images, the 5,000 held back as test_batch among them: 0.4917, 0.4824, 0.4468 over the 45,000)
MEAN = np.array([0.4914, 0.4822, 0.4465]) * 255
STD = np.array([0.2470, 0.2435, 0.2616]) * 255
PAD = 2                                            # translation range, pixels
WIDTHS = (64, 256, 256)
LABEL_SMOOTHING, MOMENTUM, BIAS_LR_SCALE, WHITEN_BIAS_EPOCHS = 0.2, 0.85, 64.0, 3
TTA_VIEWS = {   # (dy, dx, mirrored, weight of its logits)
    'off': [(0, 0, False, 1.0)],
    'flip': [(0, 0, False, 0.5), (0, 0, True, 0.5)],
    'on': [(0, 0, False, 0.25), (0, 0, True, 0.25),
           (-1, -1, False, 0.125), (-1, -1, True, 0.125), (1, 1, False, 0.125), (1, 1, True, 0.125)],
}


# ================================================================ data

class DataError(RuntimeError):
    """CIFAR-10 files missing and not downloadable, or unreadable; main() prints it and exits with 1."""


class ResumeError(ValueError):
    """A --resume checkpoint unreadable, or made with other settings than this run's; main() prints it and exits
    with 1."""


def _md5(path):
    h = hashlib.md5()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest()


def download_cifar(root):
    """Fetch the official archive into root (tqdm bar), check its MD5 and unpack cifar-10-batches-py/.
    A failed download leaves no partial file, nor a root folder it made."""
    made_root = not os.path.isdir(root)
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:   # an empty path, a file on the way, a folder that refuses it
        raise DataError(f"CIFAR-10 is not in {root!r}, and that folder cannot be made for its download "
                        f"({e.strerror or e}): point --data at the folder that holds cifar-10-batches-py/") from None
    archive = os.path.join(root, 'cifar-10-python.tar.gz')
    if not (os.path.exists(archive) and _md5(archive) == MD5):
        part = archive + '.part'
        try:
            with urllib.request.urlopen(URL, timeout=30) as r, open(part, 'wb') as f, \
                    tqdm(total=int(r.headers.get('Content-Length') or 0) or None, unit='B', unit_scale=True,
                         desc='downloading CIFAR-10', disable=None) as bar:
                for chunk in iter(lambda: r.read(1 << 20), b''):
                    f.write(chunk)
                    bar.update(len(chunk))
        except OSError as e:   # no network, DNS failure, refused, timed out (URLError is an OSError)
            with contextlib.suppress(OSError):
                os.remove(part)
            if made_root:
                with contextlib.suppress(OSError):
                    os.rmdir(root)   # only while empty
            raise DataError(
                f"CIFAR-10 is not in {root} and downloading {URL} failed ({getattr(e, 'reason', e)}): no network?\n"
                f"Copy the data set in by hand: unpack cifar-10-python.tar.gz so that {root}/cifar-10-batches-py/ "
                "holds data_batch_1..5 and test_batch, or point --data at a folder that holds "
                "cifar-10-batches-py/ (or at that folder itself). The layout written by "
                "shared/tools/cifar_jpeg_to_batches.py OUT_DIR works: --data OUT_DIR. "
                "For a timing run without data use --synthetic.") from None
        got = _md5(part)
        if got != MD5:
            os.remove(part)
            raise DataError(f"{URL}: the download has MD5 {got}, expected {MD5} (truncated or altered); run again")
        os.replace(part, archive)
    try:
        with tarfile.open(archive) as t:
            t.extractall(root, **({'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}))
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"{archive}: cannot unpack ({e}); delete it and run again") from None


def read_batch(path):
    """(images uint8 (N, 3, 32, 32), labels int64 (N,)) from one pickled batch of the python layout."""
    try:
        with open(path, 'rb') as f:
            d = pickle.load(f, encoding='bytes')
        x, y = d[b'data'], np.asarray(d[b'labels'], dtype=np.int64)
    except Exception as e:
        raise DataError(f"{path}: not a readable CIFAR-10 batch, truncated or corrupt ({type(e).__name__}: {e}); "
                        "delete it (and the archive beside it) to download it again, or fix --data") from None
    if not (isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim == 2 and x.shape[1] == 3072
            and y.shape == (len(x),) and (len(y) == 0 or 0 <= y.min() and y.max() <= 9)):
        raise DataError(f"{path}: not a CIFAR-10 batch (expected b'data' uint8 (N, 3072) and N labels in 0..9, "
                        f"got {getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')} and {len(y)} labels)")
    return x.reshape(-1, 3, 32, 32), y


SPLITS = {'train': [f'data_batch_{i}' for i in range(1, 6)], 'test': ['test_batch']}   # test: the held-back split


def cifar_folder(root, splits=('train', 'test'), download=True):
    """The folder holding the batches of `splits`: root/cifar-10-batches-py/, or root itself where it holds
    batches. Only where that folder is absent is the official archive downloaded (and unpacked into root);
    where it lacks some batches, a DataError names them and nothing is unpacked over it."""
    every = SPLITS['train'] + SPLITS['test']
    holds = any(os.path.exists(os.path.join(root, n)) for n in every)
    folder = root if holds else os.path.join(root, 'cifar-10-batches-py')
    if not os.path.isdir(folder):
        if not download:
            raise DataError(f"{folder}: no such folder (CIFAR-10's {', '.join(every)} expected there)")
        download_cifar(root)
    missing = [n for s in splits for n in SPLITS[s] if not os.path.isfile(os.path.join(folder, n))]
    if missing:
        raise DataError(f"{folder}: CIFAR-10 batches missing: {', '.join(missing)}; copy them in, or point --data "
                        "at a complete folder (delete this one to download the data set again)")
    return folder


def load_cifar(root, split, download=True):
    """(images, labels) of CIFAR-10's split 'train' (data_batch_1..5) or 'test' (test_batch) under root
    (cifar_folder's); a DataError where they hold no images."""
    folder = cifar_folder(root, [split], download)
    parts = [read_batch(os.path.join(folder, n)) for n in SPLITS[split]]
    if not sum(len(x) for x, _ in parts):
        raise DataError(f"{folder}: {', '.join(SPLITS[split])} hold no images")
    return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])


def synthetic_cifar(n_train=50000, n_test=10000, seed=0):
    """Random CIFAR-shaped images and labels, for timing only."""
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n_train, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, n_train),
            rng.integers(0, 256, (n_test, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, n_test))


class DeviceImages:
    """Images kept on the device as reflect-padded uint8, and the gather that crops, mirrors and
    normalises a batch of them: crop pixel (c, y, x) of image i shifted by (dy, dx) is padded pixel
    (i, c, PAD + dy + y, PAD + dx + x), or (..., PAD + dx + 31 - x) mirrored, so in the flat array it sits at
    base_i + c P^2 + y P + step_i x with P = 32 + 2 PAD and step_i = -1 when mirrored, else 1."""
    def __init__(self, images, device, dtype, pad=PAD):
        self.n, self.pad, self.size, self.dtype = len(images), pad, 32 + 2 * pad, dtype
        p, P = pad, self.size
        padded = np.pad(images, ((0, 0), (0, 0), (p, p), (p, p)), mode='reflect')
        self.flat = tl.Tensor(padded.reshape(-1), device=device)
        self.rows = tl.Tensor((np.arange(3)[:, None] * P * P + np.arange(32) * P).reshape(1, 3, 32, 1), device=device)
        self.cols = tl.Tensor(np.arange(32).reshape(1, 1, 1, 32), device=device)
        self.scale = tl.Tensor((1 / STD).reshape(1, 3, 1, 1), device=device, dtype=dtype)
        self.shift = tl.Tensor((-MEAN / STD).reshape(1, 3, 1, 1), device=device, dtype=dtype)

    def offsets(self, index, shifts, flips):
        """(base, step) int64 tensors on the images' device for images `index` (B,) shifted by `shifts` (B, 2) of
        (dy, dx) in [-PAD, PAD] and mirrored where `flips` (B,), all NumPy arrays."""
        P, p, flips = self.size, self.pad, np.asarray(flips, dtype=bool)
        base = np.asarray(index) * (3 * P * P) + (p + shifts[:, 0]) * P + p + shifts[:, 1] + 31 * flips
        return tuple(tl.Tensor(a.astype(np.int64), device=self.flat.device) for a in (base, np.where(flips, -1, 1)))

    def crops(self, base, step):
        """uint8 (B, 3, 32, 32) crops for (base, step) tensors (B,) on the device."""
        return self.flat[base.reshape(-1, 1, 1, 1) + self.rows + step.reshape(-1, 1, 1, 1) * self.cols]

    def batch(self, base, step):
        """The normalised crops, in the activation dtype."""
        return self.crops(base, step).to(self.dtype) * self.scale + self.shift


def epoch_plan(rng, n, flip0, epoch, pad=PAD):
    """This epoch's (order, shifts, flips), NumPy, from rng: a new order and new shifts every epoch;
    flips alternate: flip0 (drawn once per run) in even epochs (counting from 0), its negation in odd ones."""
    index = rng.permutation(n)
    shifts = rng.integers(-pad, pad + 1, size=(n, 2))
    return index, shifts, flip0[index] ^ bool(epoch % 2)


# ================================================================ model

# Weights stay float32 (the master copy); each is cast to the activations' dtype where the forward pass
# reads it (no op when they agree). BatchNorm takes float16 input with float32 parameters and statistics.

def norm_gelu(norm, x):
    """GELU(BatchNorm(x)) with the BatchNorm2d layer `norm`'s parameters and statistics, in one op. float16
    activations take the float32 parameters as they are (mixed precision), float64 ones a float64 copy."""
    weight, bias = (p if x.dtype == np.float16 else p.to(x.dtype) for p in (norm.weight, norm.bias))
    return tl.batch_norm(x, norm.running_mean, norm.running_var, weight, bias, norm.training, norm.momentum, norm.eps,
                         activation='gelu')


class ConvGroup(tl.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv1 = tl.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.norm1 = tl.BatchNorm2d(c_out, eps=1e-12, momentum=0.4)   # airbench's "momentum 0.6" = 1 - 0.4
        self.conv2 = tl.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.norm2 = tl.BatchNorm2d(c_out, eps=1e-12, momentum=0.4)

    def forward(self, x):
        x = norm_gelu(self.norm1, tl.max_pool2d(tl.conv2d(x, self.conv1.weight.to(x.dtype), padding=1), 2))
        return norm_gelu(self.norm2, tl.conv2d(x, self.conv2.weight.to(x.dtype), padding=1))


class Net(tl.Module):
    def __init__(self, widths=WIDTHS, logit_scale=1 / 9):
        super().__init__()
        self.whiten = tl.Conv2d(3, 24, 2, bias=True)
        self.blocks = [ConvGroup(24, widths[0]), ConvGroup(widths[0], widths[1]), ConvGroup(widths[1], widths[2])]
        self.head = tl.Linear(widths[2], 10, bias=False)
        self.logit_scale = logit_scale

    def forward(self, x):
        x = tl.gelu(tl.conv2d(x, self.whiten.weight.to(x.dtype), self.whiten.bias.to(x.dtype)))
        for block in self.blocks:
            x = block(x)
        x = tl.max_pool2d(x, x.shape[2:]).flatten(1)
        return tl.linear(x, self.head.weight.to(x.dtype)) * self.logit_scale


def whitening_filters(images, n=5000, eps=5e-4):
    """(24, 3, 2, 2) filters from the first n of DeviceImages `images`, computed on their device: the
    eigenvectors of the (uncentred) covariance of every 2x2 patch of the normalised images, largest
    eigenvalue first, each divided by sqrt(eigenvalue + eps); then their negatives."""
    index = np.arange(min(n, images.n))
    offsets = images.offsets(index, np.zeros((len(index), 2), np.int64), np.zeros(len(index), bool))
    with tl.no_grad():
        x = images.crops(*offsets).float()
        x = x * images.scale.float() + images.shift.float()
        # a patch's 12 values in the weight's (c, kh, kw) order: the four shifted views stacked as kh * 2 + kw
        p = tl.stack([x[:, :, i:i + 31, j:j + 31] for i in (0, 1) for j in (0, 1)], axis=2)
        p = p.permute(1, 2, 0, 3, 4).reshape(12, -1)
        cov = (p @ p.T).numpy().astype(np.float64) / p.shape[1]
    eigenvalues, eigenvectors = np.linalg.eigh(cov)
    w = (eigenvectors / np.sqrt(eigenvalues + eps)).T[::-1].reshape(12, 3, 2, 2)
    return np.concatenate([w, -w]).astype(np.float32)


def make_model(whitening=None, widths=WIDTHS):
    """The net on the CPU, initialised as airbench does, with `whitening` (whitening_filters's) as the
    first layer's fixed filters (the default init without)."""
    model = Net(widths)
    with tl.no_grad():
        for block in model.blocks:
            for conv in (block.conv1, block.conv2):
                w, k = conv.weight.data, min(conv.weight.shape[:2])
                w[:k] = 0
                w[np.arange(k), np.arange(k), 1, 1] = 1   # the first C_in filters pass their input through
        if whitening is not None:
            model.whiten.weight.data[...] = whitening
        model.whiten.bias.zero_()
    model.whiten.weight.requires_grad_(False)
    for block in model.blocks:
        block.norm1.weight.requires_grad_(False)
        block.norm2.weight.requires_grad_(False)
    return model


def make_optimizer(model, lr, weight_decay, batch_size, momentum=MOMENTUM):
    """Nesterov SGD with airbench's scaling, in three groups: BatchNorm shifts, the other weights, the
    whitening bias (its lr goes to 0 after WHITEN_BIAS_EPOCHS). Returns (optimizer, the groups' base lrs)."""
    # With constant gradients a Nesterov step adds up to 1 + 1/(1 - momentum) of them: divide that out.
    scale = 1024 * (1 + 1 / (1 - momentum))
    lr, decay = lr / scale, weight_decay * batch_size / scale
    shifts = [n.bias for b in model.blocks for n in (b.norm1, b.norm2)]
    special = {id(p) for p in shifts} | {id(model.whiten.bias)}
    others = [p for p in model.parameters() if p.requires_grad and id(p) not in special]
    groups = [(shifts, lr * BIAS_LR_SCALE), (others, lr), ([model.whiten.bias], lr)]
    # PyTorch's SGD multiplies weight_decay by the lr: divide it out so the decay per step is `decay`
    opt = tl.SGD([{'params': ps, 'lr': g, 'weight_decay': decay / g if g else 0.0} for ps, g in groups],
                 lr=lr, momentum=momentum, nesterov=True)
    return opt, [g for _, g in groups]


def lr_schedule(total_steps):
    """The lr multiplier before each step: 0.2 -> 1 linearly over the first 23% of steps, then -> 0.07."""
    return np.interp(np.arange(total_steps + 1), [0, int(0.23 * total_steps), total_steps], [0.2, 1.0, 0.07])


class Lookahead:
    """airbench's Lookahead: an average that trails the trained tensors (and BatchNorm statistics);
    update(decay) moves it toward them by 1 - decay and sets them to it."""
    def __init__(self, model):
        self.tensors = [p for p in model.parameters() if p.requires_grad] + \
                       [b for b in model.buffers() if b.dtype.kind == 'f']
        self.average = [t.detach().clone() for t in self.tensors]

    def update(self, decay):
        with tl.no_grad():
            for t, avg in zip(self.tensors, self.average):
                avg += (t - avg) * (1 - decay)
                t.data[...] = avg.data


# ================================================================ training and evaluation

def train_step(model, opt, x, y):
    logits = model(x)
    loss = tl.cross_entropy(logits.float(), y, label_smoothing=LABEL_SMOOTHING, reduction='sum')
    opt.zero_grad()
    loss.backward()
    opt.step()
    return logits, loss


class CapturedStep:
    """train_step recorded into a CUDA graph and replayed: on the GPU a step is then one launch
    instead of hundreds. The first call runs eagerly (it creates the optimizer's momentum buffers), the
    second records the step and replays it; later calls copy the batch into the recorded input arrays
    and replay. The learning rates live in one-element tensors on the device, refilled every step."""
    def __init__(self, model, opt, device):
        self.model, self.opt, self.graph = model, opt, None
        self.rates = [tl.Tensor(np.float32(0), device=device) for _ in opt.param_groups]

    def __call__(self, x, y, rates):
        for rate, group, value in zip(self.rates, self.opt.param_groups, rates):
            rate.data.fill(value)
            group['lr'] = rate
        if self.graph is None and not self.opt.state:
            return train_step(self.model, self.opt, x, y)
        if self.graph is None:
            self.x, self.y = x.clone().detach(), y.clone().detach()
            self.graph = tl.CUDAGraph()
            with self.graph.capture():
                self.logits, self.loss = train_step(self.model, self.opt, self.x, self.y)
        else:
            self.x.data[...] = x.data
            self.y.data[...] = y.data
        self.graph.replay()
        return self.logits, self.loss


def evaluate(model, images, labels, tta='off', batch_size=1000):
    """(accuracy of the plain view, accuracy of the logits averaged over TTA_VIEWS[tta]) in one pass."""
    model.eval()
    plain = combined = 0
    with tl.no_grad():
        for start in range(0, images.n, batch_size):
            index = np.arange(start, min(start + batch_size, images.n))
            logits = []
            for dy, dx, flip, weight in TTA_VIEWS[tta]:
                offsets = images.offsets(index, np.tile([dy, dx], (len(index), 1)), np.full(len(index), flip))
                x = images.batch(*offsets)
                logits.append(model(x).float() * weight)
            plain += int((logits[0].argmax(axis=1).numpy() == labels[index]).sum())
            combined += int((sum(logits[1:], logits[0]).argmax(axis=1).numpy() == labels[index]).sum())
    model.train()
    return plain / max(images.n, 1), combined / max(images.n, 1)


def warm_up(images, labels, batch, widths, device, steps=3):
    """A few steps and an evaluation batch on a throwaway net (training images, fixed crops): compiles
    kernels and fills the memory pool so that the timed run measures steady-state steps."""
    model = make_model(None, widths).to(device)
    opt, _ = make_optimizer(model, 1.0, 0.0, batch)
    lookahead = Lookahead(model)
    index = np.arange(batch) % images.n
    base, xstep = images.offsets(index, np.zeros((batch, 2), np.int64), index % 2 == 1)
    y = tl.Tensor(labels[index], device=device)
    for _ in range(steps):
        logits, loss = train_step(model, opt, images.batch(base, xstep), y)
        ((logits.argmax(axis=1) == y).sum() + loss).item()
    lookahead.update(0.5)
    model.eval()
    with tl.no_grad():
        model(images.batch(base, xstep)).float().argmax(axis=1).numpy()
    whitening_filters(images, n=batch)


def save_checkpoint(path, model, opt, lookahead, rng, flip0, epoch, step, train_time, config):
    """tl.save writes a temporary file beside `path` and renames it over `path`: never a half file."""
    tl.save({'model': model.state_dict(), 'optimizer': opt.state_dict(),
             'lookahead': [a.numpy() for a in lookahead.average], 'rng': rng.bit_generator.state,
             'flip0': flip0, 'epoch': epoch, 'step': step, 'train_time': train_time, 'config': config}, path)


def load_checkpoint(path, config):
    """save_checkpoint's dict from `path`; a ResumeError naming path where it is unreadable, not a checkpoint,
    or made with another `config` (every setting that changes the arithmetic) than this run's."""
    try:
        ck = tl.load(path)
    except Exception as e:   # missing, a folder, truncated, not an .npz of tl.save's
        raise ResumeError(f"--resume {path}: cannot read it as a checkpoint ({type(e).__name__}: {e})") from None
    keys = ('model', 'optimizer', 'lookahead', 'rng', 'flip0', 'epoch', 'step', 'train_time', 'config')
    if not (isinstance(ck, dict) and all(k in ck for k in keys)):
        raise ResumeError(f"--resume {path}: not a checkpoint of train_cifar.py --save (a dict of {', '.join(keys)} "
                          "expected)")
    if ck['config'] != config:
        raise ResumeError(f"--resume {path}: the checkpoint was made with {ck['config']}, this run has {config}; "
                          "resume with the same settings")
    return ck


def train(args):
    """Train and evaluate as args (parse_args's namespace) say. The held-back split (test_batch) is read and
    evaluated only once training has reached the end of the schedule; a run that --stop-after ends before it
    does not test. Returns a dict: test_acc (with TTA), test_acc_no_tta (with --val: val_acc, val_acc_no_tta, on the
    held-back training images), eval_time (the final evaluation's; these three None where the run did not test),
    train_time, warmup_time (seconds), epochs (this run's per-epoch records, as logged), steps (done in all), model.
    The log's last line has the same accuracies."""
    device = args.device or ('cuda' if tl.cuda_is_available() else 'cpu')
    dtype = np.dtype(args.dtype or ('float16' if device.startswith('cuda') else 'float32'))
    widths, loading = args.widths, time.perf_counter()
    if args.synthetic:
        # a test set an eighth the size of the training set keeps quick CPU runs quick
        n_train = min(args.train_limit or 50000, 50000)
        x_train, y_train, *test_set = synthetic_cifar(n_train, min(10000, max(1, n_train // 8)), args.seed)
        print('synthetic data: random images and labels, for timing only (accuracies mean nothing)', flush=True)
    else:
        x_train, y_train = load_cifar(args.data, 'train')
    loading = time.perf_counter() - loading
    if args.val:   # the last N training images held back for validation: the held-back split stays unread
        if args.val >= len(x_train):
            raise DataError(f'--val {args.val} leaves none of the {len(x_train)} training images to train on')
        (x_train, x_val), (y_train, y_val) = np.split(x_train, [-args.val]), np.split(y_train, [-args.val])
    if args.train_limit:
        x_train, y_train = x_train[:args.train_limit], y_train[:args.train_limit]
    batch = min(args.batch_size, len(x_train))
    steps_per_epoch = len(x_train) // batch
    total_steps = max(1, math.ceil(steps_per_epoch * args.epochs))
    n_epochs = math.ceil(total_steps / steps_per_epoch)
    last_epoch = min(n_epochs, args.stop_after or n_epochs)
    config = dict(epochs=args.epochs, batch_size=batch, lr=args.lr, weight_decay=args.weight_decay, seed=args.seed,
                  n_train=len(x_train), val=args.val, widths=list(widths), synthetic=bool(args.synthetic),
                  dtype=dtype.name, device=device.split(':')[0])   # what resuming must match: what changes the results

    train_images = DeviceImages(x_train, device, dtype)
    warmup_time = 0.0
    if device != 'cpu':
        t0 = time.perf_counter()
        warm_up(train_images, y_train, batch, widths, device)
        warmup_time = time.perf_counter() - t0

    rng = np.random.default_rng(args.seed)
    flip0 = rng.random(len(x_train)) < 0.5
    tl.manual_seed(args.seed)
    t0 = time.perf_counter()
    model = make_model(None if args.resume else whitening_filters(train_images), widths).to(device)
    opt, base_lrs = make_optimizer(model, args.lr, args.weight_decay, batch)
    lookahead = Lookahead(model)
    start_epoch, step, train_time = 0, 0, time.perf_counter() - t0   # the whitening counts, as in airbench
    if args.resume:
        ck = load_checkpoint(args.resume, config)
        model.load_state_dict(ck['model'])
        opt.load_state_dict(ck['optimizer'])
        lookahead.average = [tl.Tensor(a, device=device) for a in ck['lookahead']]
        rng.bit_generator.state, flip0 = ck['rng'], ck['flip0']
        start_epoch, step, train_time = ck['epoch'], ck['step'], ck['train_time']
        print(f'resumed from {args.resume} after epoch {start_epoch} (step {step} of {total_steps})', flush=True)
    last_epoch = max(start_epoch, last_epoch)   # (a finished checkpoint resumed with --stop-after: to the test)
    if last_epoch == n_epochs and not args.synthetic and not args.val:   # test_batch, read after training: there now
        cifar_folder(args.data, ['test'])
    captured = CapturedStep(model, opt, device) if device != 'cpu' and args.cuda_graph == 'on' else None
    schedule = lr_schedule(total_steps)
    decay = 0.95 ** 5 * (np.arange(total_steps + 1) / total_steps) ** 3
    print(f'{len(x_train)} training images; {device} {dtype.name}; batch {batch}, '
          f'{total_steps} steps ({args.epochs:g} epochs); data loaded in {loading:.2f} s; warm-up {warmup_time:.2f} s',
          flush=True)
    cpu_hours = (total_steps - step) * batch / 50 / 3600   # 2 CPU cores trained about 50 images/s
    if device == 'cpu' and cpu_hours > 0.2:
        print(f'note: about {cpu_hours:.1f} h on a CPU of 2 cores (50 images/s); --train-limit and --epochs make a '
              'shorter run', flush=True)
    if device == 'cpu' and last_epoch == n_epochs:   # 2 CPU cores evaluated 5,000 images in 6 views in 217 s
        print(f'note: the final evaluation takes about {len(TTA_VIEWS[args.tta]) * 7:.0f} s per 1,000 images on a CPU '
              'of 2 cores (--tta off: one view of each)', flush=True)
    print(f"{'epoch':>5} {'train_loss':>10} {'train_acc':>9} {'train_time':>10}", flush=True)
    records, log = [], open(args.log, 'a' if args.resume else 'w') if args.log else None
    for epoch in range(start_epoch, last_epoch):
        steps = min(steps_per_epoch, total_steps - step)
        index, shifts, flips = epoch_plan(rng, len(x_train), flip0, epoch)
        index, shifts, flips = index[:steps * batch], shifts[:steps * batch], flips[:steps * batch]
        base, xstep = train_images.offsets(index, shifts, flips)
        labels = tl.Tensor(y_train[index], device=device)
        bar = tqdm(total=steps * batch, unit='img', unit_scale=True, leave=False, disable=None,
                   desc=f'epoch {epoch + 1}/{n_epochs}')
        t0 = time.perf_counter()
        loss_sum = correct = 0
        for i in range(steps):
            s = slice(i * batch, (i + 1) * batch)
            rates = [float(lr * schedule[step]) for lr in base_lrs]
            if epoch >= WHITEN_BIAS_EPOCHS:
                rates[2] = 0.0
            x, y = train_images.batch(base[s], xstep[s]), labels[s]
            if captured is not None:
                logits, loss = captured(x, y, rates)
            else:
                for group, rate in zip(opt.param_groups, rates):
                    group['lr'] = rate
                logits, loss = train_step(model, opt, x, y)
            step += 1
            if step % 5 == 0:
                lookahead.update(float(decay[step]))
            if step == total_steps:
                lookahead.update(1.0)
            with tl.no_grad():
                loss_sum = loss.detach() + loss_sum
                correct = (logits.argmax(axis=1) == y).sum() + correct
            bar.update(batch)
            if i % 10 == 9 and not bar.disable:   # reading the loss waits for the device: only now and then
                bar.set_postfix(loss=f'{loss.item() / batch:.3f}', refresh=False)
        loss_sum, correct = loss_sum.item(), correct.item()   # waits for the device to finish the epoch
        train_time += time.perf_counter() - t0
        bar.close()
        record = dict(epoch=epoch + 1, train_loss=loss_sum / (steps * batch), train_acc=correct / (steps * batch),
                      train_time=train_time)
        print(f"{epoch + 1:>5} {record['train_loss']:>10.4f} {record['train_acc']:>9.2%} {train_time:>8.2f} s",
              flush=True)
        if args.save:
            save_checkpoint(args.save, model, opt, lookahead, rng, flip0, epoch + 1, step, train_time, config)
        if log:
            log.write(json.dumps(record) + '\n')
            log.flush()
        records.append(record)
    split = 'val' if args.val else 'test'   # what the final evaluation runs on
    accuracy = plain = eval_time = None
    if last_epoch < n_epochs:
        print(f'stopped after epoch {last_epoch} of {n_epochs} (--stop-after): no {split} evaluation '
              f'| training time {train_time:.2f} s | warm-up/compile {warmup_time:.2f} s', flush=True)
    else:   # training has ended: only now is the held-back split read (with --val: the held-back training images)
        x_eval, y_eval = (x_val, y_val) if args.val else test_set if args.synthetic else load_cifar(args.data, 'test')
        t0 = time.perf_counter()
        plain, accuracy = evaluate(model, DeviceImages(x_eval, device, dtype), y_eval, args.tta)
        eval_time = time.perf_counter() - t0
        print(f"final {'validation' if args.val else 'test'} accuracy {accuracy:.2%} (tta {args.tta}; {plain:.2%} "
              f'without) on {len(x_eval)} images | training time {train_time:.2f} s | final evaluation '
              f'{eval_time:.2f} s | warm-up/compile {warmup_time:.2f} s', flush=True)
        if log:
            log.write(json.dumps({f'{split}_acc': accuracy, f'{split}_acc_no_tta': plain, 'tta': args.tta,
                                  'train_time': train_time, 'eval_time': eval_time, 'warmup_time': warmup_time,
                                  'steps': step, 'device': device, 'dtype': dtype.name}) + '\n')
    if log:
        log.close()
    return {f'{split}_acc': accuracy, f'{split}_acc_no_tta': plain, 'train_time': train_time, 'eval_time': eval_time,
            'warmup_time': warmup_time, 'epochs': records, 'steps': step, 'model': model}


def _widths(text):
    """--widths's type: three positive integers, comma-separated."""
    try:
        widths = tuple(int(w) for w in text.split(','))
    except ValueError:
        widths = ()
    if len(widths) != 3 or min(widths) < 1:
        raise argparse.ArgumentTypeError(f'{text!r}: expected three positive integers, such as 64,256,256')
    return widths


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], epilog=__doc__.split('\n\n', 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--data', default='./data', help='folder holding cifar-10-batches-py/ (downloaded there if missing)')
    p.add_argument('--synthetic', action='store_true', help='random CIFAR-shaped data, for timing only')
    p.add_argument('--device', default=None, help="'cpu', 'cuda' or 'cuda:N' (default: cuda where available)")
    # chosen on --val 5000 alone (the last 5,000 training images; test_batch never read): 5-seed mean validation
    # accuracy 89.94% at airbench94's 9.9 epochs, 90.53% at 12, 90.70% at 14; the rule, fixed before the runs, took the
    # fewest epochs reaching the 90.5% target (README, CIFAR-10)
    p.add_argument('--epochs', type=float, default=12, help='epochs of training, fractions allowed (default 12)')
    p.add_argument('--batch-size', type=int, default=1024, help='images a step (default 1024)')
    p.add_argument('--lr', type=float, default=11.5, help='learning rate per 1024 examples (default 11.5)')
    p.add_argument('--weight-decay', type=float, default=0.0153, help='weight decay per 1024 examples')
    p.add_argument('--seed', type=int, default=0, help="the run's randomness: initialisation, order, augmentation")
    p.add_argument('--train-limit', type=int, default=None, metavar='N', help='train on the first N images only')
    p.add_argument('--val', type=int, default=None, metavar='N',
                   help='hold the last N training images back as a validation set: not trained on, evaluated at the '
                        'end in place of test_batch, which such a run never reads (choose settings on it, not on '
                        'test_batch; 5000 mirrors the held-back split)')
    p.add_argument('--dtype', choices=['float16', 'float32', 'float64'], default=None,
                   help='activation dtype (default float16 on the GPU, float32 on the CPU)')
    p.add_argument('--widths', type=_widths, default=WIDTHS, help="the three blocks' widths (default 64,256,256)")
    p.add_argument('--tta', choices=['on', 'flip', 'off'], default='on',
                   help='test-time augmentation: mirror and 1-pixel shifts (on), mirror only (flip), none (off)')
    p.add_argument('--save', metavar='PATH', help='write a checkpoint after every epoch (atomically)')
    p.add_argument('--resume', metavar='PATH', help='continue from a --save checkpoint, same settings')
    p.add_argument('--stop-after', type=int, default=None, metavar='E',
                   help='stop after epoch E (the schedule still spans --epochs): with --save, --resume later; '
                        'a run stopped before the end of the schedule does not evaluate on the test set')
    p.add_argument('--log', metavar='PATH',
                   help='write one JSON line per epoch (training loss and accuracy), then one of the final evaluation')
    p.add_argument('--cuda-graph', choices=['on', 'off'], default='on',
                   help='on the GPU, record the training step into a CUDA graph and replay it (default on)')
    args = p.parse_args(argv)
    for name, value in (('--epochs', args.epochs), ('--lr', args.lr)):
        if not (math.isfinite(value) and value > 0):
            p.error(f'{name} must be a finite number > 0, not {value}')
    if args.epochs > 10000:   # (its schedule is an array a step)
        p.error(f'--epochs must be at most 10000, not {args.epochs:g}')
    if args.seed >= 2 ** 64:   # as tl.manual_seed's (and PyTorch's) range
        p.error(f'--seed must be below 2**64, not {args.seed}')
    if not (math.isfinite(args.weight_decay) and args.weight_decay >= 0):
        p.error(f'--weight-decay must be a finite number >= 0, not {args.weight_decay}')
    for name, value, least in (('--batch-size', args.batch_size, 1), ('--train-limit', args.train_limit, 1),
                               ('--val', args.val, 1), ('--stop-after', args.stop_after, 1), ('--seed', args.seed, 0)):
        if value is not None and value < least:
            p.error(f'{name} must be at least {least}, not {value}')
    if not args.synthetic and os.path.exists(args.data) and not os.path.isdir(args.data):
        p.error(f'--data {args.data}: a file; give the folder holding cifar-10-batches-py/ (or the batches)')
    for name, path in (('--save', args.save), ('--log', args.log)):   # checked now, not after an epoch
        if path is None:
            continue
        folder = os.path.dirname(path) or '.'
        if os.path.isdir(path):
            p.error(f'{name} {path}: a folder; give a file path')
        if not os.path.isdir(folder):
            p.error(f'{name} {path}: its folder {folder} does not exist')
        try:   # (a file can be made there: the checkpoint's temporary file and the log)
            tempfile.TemporaryFile(dir=folder).close()
        except OSError as e:
            p.error(f'{name} {path}: cannot write a file in its folder ({e.strerror})')
    if args.device is not None and not re.fullmatch(r'cpu|cuda(:\d+)?', args.device):
        p.error(f"--device {args.device}: unknown device; expected 'cpu', 'cuda' or 'cuda:N'")
    if args.device not in (None, 'cpu'):
        if not tl.cuda_is_available():
            p.error(f"--device {args.device} needs CuPy and an NVIDIA GPU (pip install cupy-cuda12x, or cupy-cuda13x "
                    "for CUDA 13); --device cpu runs without")
        try:
            tl.zeros(1, device=args.device)   # a GPU of that index exists
        except RuntimeError as e:
            p.error(f'--device {args.device}: {e}')
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        train(args)
    except (DataError, ResumeError) as e:
        sys.exit(f'error: {e}')


if __name__ == '__main__':
    main()
