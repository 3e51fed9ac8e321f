"""CI: compile kernels.cu with NVRTC as tinygrad_lite._load_kernels does on a GPU (a module per kernel name with
_module_options, every name expression; the sm_90a ones too), on a machine without one. NVRTC rejects some code that
nvcc accepts (in C++17, a lambda capturing a structured binding: the H200's module once failed to load so).
-default-device stands for CuPy's handling of unannotated functions (kernels.cu's constexpr helpers and lambdas).
usage: python .ci/nvrtc_check.py LIBNVRTC   (from the repository root; nvcc on PATH gives the CUDA headers)"""
import ctypes
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, '.')
import tinygrad_lite as tl  # noqa: E402


def cuda_includes():
    """The include options nvcc itself uses (its dry run prints them; none found: NVRTC's own)."""
    dry = subprocess.run(['nvcc', '--dryrun', '-x', 'cu', '-E', '/dev/null'], capture_output=True, text=True).stderr
    return re.findall(r'-I(\S+?)"?\s', next((line for line in dry.splitlines() if 'INCLUDES=' in line), '') + ' ')


def checked(status, call):
    if status != 0:
        raise RuntimeError(f'{call} returned NVRTC status {status}')


def compile_module(nvrtc, source, names, options):
    """nvrtcCompileProgram's status and log for source with name expressions `names`."""
    program = ctypes.c_void_p()
    checked(nvrtc.nvrtcCreateProgram(ctypes.byref(program), source, b'kernels.cu', 0, None, None), 'nvrtcCreateProgram')
    for name in names:
        checked(nvrtc.nvrtcAddNameExpression(program, name.encode()), f'nvrtcAddNameExpression({name})')
    status = nvrtc.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(program, log)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
    return status, log.value.decode(errors='replace')


def main(library):
    nvrtc = ctypes.CDLL(library)
    with open(tl._KERNEL_PATH, 'rb') as f:
        source = f.read()
    common = [b'-default-device'] + [f'-I{d}'.encode() for d in cuda_includes()]

    def compile_kernel(job):   # as the loader, with sm_90 or sm_80 where CuPy picks the device's architecture
        name, arch = job
        options = [o.encode() for o in tl._module_options(name)]
        return compile_module(nvrtc, source, tl._name_expressions(name), common + options
                              + ([] if name in tl._SM90A else [f'-arch={arch}'.encode()])
                              + ([b'--device-c'] if name in tl._COOPERATIVE else []))   # CuPy's for cooperative groups
    # every module for sm_90; those loaded on any GPU (not _SM90A) for sm_80 too: Hopper-only code must not break them
    jobs = [(name, 'sm_90') for name in tl._KERNEL_INSTANCES] + [(name, 'sm_80') for name in tl._KERNEL_INSTANCES
                                                                 if name not in tl._SM90A]
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:   # ctypes lets go of the GIL in NVRTC's calls
        results = [(f'{name} ({arch})', result) for (name, arch), result in zip(jobs, pool.map(compile_kernel, jobs))]
    failed = [(name, log) for name, (status, log) in results if status]
    print(f'ci: NVRTC, {len(results)} module builds (sm_90, and sm_80 but for the Hopper-only ones; '
          f'{len(tl._kernel_name_expressions())} kernels): '
          f'{"compiled" if not failed else f"{len(failed)} FAILED: " + ", ".join(name for name, _ in failed)}')
    for name, log in failed[:3]:
        print(f'{name}:\n' + '\n'.join(line for line in log.splitlines() if 'error' in line or line.startswith(' '))[-4000:])
    return len(failed)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
