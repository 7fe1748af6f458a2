import inspect, torch, triton, triton.testing as tt
print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0))
print("do_bench", inspect.signature(tt.do_bench))
print("do_bench_cudagraph", inspect.signature(tt.do_bench_cudagraph))
from torch.testing._internal.optests import generate_tests as gt
src = inspect.getsource(gt)
i = src.find("def safe_autograd_registration_check")
print(src[i:i+700])
import pytest, hypothesis; print("pytest", pytest.__version__, "hypothesis", hypothesis.__version__)
# does the caching allocator reuse blocks freed during a capture?
x = torch.randn(4096, 4096, device="cuda")
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    torch.softmax(x, -1)
    g = torch.cuda.CUDAGraph()
    torch.cuda.reset_peak_memory_stats()
    with torch.cuda.graph(g):
        for _ in range(50):
            torch.softmax(x, -1)
print("peak MiB during 50 captured 64 MiB softmaxes:", torch.cuda.max_memory_allocated() / 2**20)
