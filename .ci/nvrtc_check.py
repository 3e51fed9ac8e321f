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

    def compile_kernel(name):   # as the loader, with sm_90 where CuPy picks the device's architecture
        options = [o.encode() for o in tl._module_options(name)]
        return compile_module(nvrtc, source, tl._name_expressions(name), common + options
                              + ([] if name in tl._SM90A else [b'-arch=sm_90'])
                              + ([b'--device-c'] if name in tl._COOPERATIVE else []))   # CuPy's for cooperative groups
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:   # ctypes lets go of the GIL in NVRTC's calls
        results = list(zip(tl._KERNEL_INSTANCES, pool.map(compile_kernel, tl._KERNEL_INSTANCES)))
    failed = [(name, log) for name, (status, log) in results if status]
    print(f'ci: NVRTC, {len(results)} modules ({len(tl._kernel_name_expressions())} kernels): '
          f'{"compiled" if not failed else f"{len(failed)} FAILED: " + ", ".join(name for name, _ in failed)}')
    for name, log in failed[:3]:
        print(f'{name}:\n' + '\n'.join(line for line in log.splitlines() if 'error' in line or line.startswith(' '))[-4000:])
    return len(failed)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
