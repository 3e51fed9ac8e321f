"""CI: compile kernels.cu with NVRTC as tinygrad_lite._load_kernels does on a GPU (its three modules: plain,
cooperative, sm_90a with -DTL_SM90A; every name expression), on a machine without one. NVRTC rejects some code that
nvcc accepts (in C++17, a lambda capturing a structured binding: the H200's module once failed to load so).
-default-device stands for CuPy's handling of unannotated functions (kernels.cu's constexpr helpers and lambdas).
usage: python .ci/nvrtc_check.py LIBNVRTC   (from the repository root; nvcc on PATH gives the CUDA headers)"""
import ctypes
import re
import subprocess
import sys

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
    common = [b'-std=c++17', b'-default-device'] + [f'-I{d}'.encode() for d in cuda_includes()]
    failed = 0
    for cooperative, sm90a in ((False, False), (True, False), (False, True)):
        names = [e for e in tl._kernel_name_expressions()
                 if (e.split('<')[0] in tl._COOPERATIVE, e.split('<')[0] in tl._SM90A) == (cooperative, sm90a)]
        status, log = compile_module(nvrtc, source, names, common + ([b'-arch=sm_90a', b'-DTL_SM90A'] if sm90a
                                                                     else [b'-arch=sm_90']))
        print(f'ci: NVRTC, {"cooperative" if cooperative else "sm_90a" if sm90a else "plain"} module, '
              f'{len(names)} kernels: {"compiled" if status == 0 else f"FAILED (status {status})"}')
        if status:
            failed += 1
            print('\n'.join(line for line in log.splitlines() if 'error' in line or line.startswith(' '))[-4000:])
    return failed


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
