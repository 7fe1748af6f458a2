// SPDX-License-Identifier: Apache-2.0
// reducekit._eager: the functional API's eager calls (softmax, log_softmax, layer_norm, rms_norm,
// the reductions), straight into the dispatcher through each op's typed handle. torch.ops'
// generic entry matches the arguments against the schema and calls the op boxed, about 2 us of
// host time a call (aten's own ops pay it too through torch.ops; bench/host_overhead.py).
// These functions take exactly the argument types the Python wrappers pass; the dispatcher still
// runs every key (autograd, dispatch modes, fake tensors), so results are torch.ops'. A call they
// do not take (another argument type, a tensor subclass, an active __torch_function__ mode)
// returns NotImplemented and the wrapper calls torch.ops; so do calls while torch.compile traces.
#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/python_headers.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/utils/python_numbers.h>

#include <iterator>
#include <optional>
#include <tuple>

#include "find_op.hpp"

namespace {

using reducekit_torch::find_op;

using OptionalTensor = std::optional<at::Tensor>;

// torch.Tensor itself (or a Parameter) while no __torch_function__ mode is active: what the
// dispatcher call below handles exactly as torch.ops would (torch.Tensor's own __torch_function__
// is the default one, which torch.ops skips for such tensors too).
bool plain_tensor(PyObject* obj) { return THPVariable_CheckExact(obj) && !at::impl::torch_function_mode_enabled(); }

bool optional_tensor(PyObject* obj) { return obj == Py_None || plain_tensor(obj); }

OptionalTensor unpack_optional(PyObject* obj) {
  if (obj == Py_None) return std::nullopt;
  return THPVariable_Unpack(obj);
}

// A list or tuple (torch.Size too) of Python ints.
bool int_list(PyObject* obj, c10::SmallVector<int64_t, 4>* out) {
  if (!PyList_Check(obj) && !PyTuple_Check(obj)) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  PyObject** items = PySequence_Fast_ITEMS(obj);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!THPUtils_checkLong(items[i])) return false;
    out->push_back(THPUtils_unpackLong(items[i]));
  }
  return true;
}

// The op runs without the GIL, as torch's own bindings run theirs.
template <class Call> auto without_gil(Call call) {
  const pybind11::gil_scoped_release no_gil;
  return call();
}

PyObject* wrap(at::Tensor t) { return THPVariable_Wrap(std::move(t)); }

PyObject* pair(at::Tensor a, at::Tensor b) {
  PyObject* out = PyTuple_New(2);
  if (out == nullptr) return nullptr;
  PyTuple_SET_ITEM(out, 0, wrap(std::move(a)));
  PyTuple_SET_ITEM(out, 1, wrap(std::move(b)));
  return out;
}

// softmax(input, dim) / log_softmax(input, dim) -> Tensor
template <bool kLog> PyObject* rowwise(PyObject*, PyObject* const* args, Py_ssize_t n) {
  HANDLE_TH_ERRORS
  if (n != 2 || !plain_tensor(args[0]) || !THPUtils_checkLong(args[1])) Py_RETURN_NOTIMPLEMENTED;
  static const auto op =
      find_op<at::Tensor(const at::Tensor&, int64_t)>(kLog ? "reducekit::log_softmax" : "reducekit::softmax");
  const at::Tensor& x = THPVariable_Unpack(args[0]);
  const int64_t dim = THPUtils_unpackLong(args[1]);
  return wrap(without_gil([&] { return op.call(x, dim); }));
  END_HANDLE_TH_ERRORS
}

// layer_norm(input, normalized_shape, weight, bias, eps) -> y
PyObject* layer_norm(PyObject*, PyObject* const* args, Py_ssize_t n) {
  HANDLE_TH_ERRORS
  c10::SmallVector<int64_t, 4> shape;
  if (n != 5 || !plain_tensor(args[0]) || !int_list(args[1], &shape) || !optional_tensor(args[2]) ||
      !optional_tensor(args[3]) || !PyFloat_Check(args[4]))
    Py_RETURN_NOTIMPLEMENTED;
  static const auto op = find_op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
      const at::Tensor&, c10::IntArrayRef, const OptionalTensor&, const OptionalTensor&, double)>(
      "reducekit::layer_norm");
  const at::Tensor& x = THPVariable_Unpack(args[0]);
  const OptionalTensor weight = unpack_optional(args[2]), bias = unpack_optional(args[3]);
  const double eps = PyFloat_AS_DOUBLE(args[4]);
  return wrap(without_gil([&] { return std::get<0>(op.call(x, shape, weight, bias, eps)); }));
  END_HANDLE_TH_ERRORS
}

// rms_norm(input, normalized_shape, weight, eps, bias) -> y
PyObject* rms_norm(PyObject*, PyObject* const* args, Py_ssize_t n) {
  HANDLE_TH_ERRORS
  c10::SmallVector<int64_t, 4> shape;
  if (n != 5 || !plain_tensor(args[0]) || !int_list(args[1], &shape) || !optional_tensor(args[2]) ||
      !PyFloat_Check(args[3]) || !optional_tensor(args[4]))
    Py_RETURN_NOTIMPLEMENTED;
  static const auto op = find_op<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, c10::IntArrayRef,
                                                                    const OptionalTensor&, double, const OptionalTensor&)>(
      "reducekit::rms_norm");
  const at::Tensor& x = THPVariable_Unpack(args[0]);
  const OptionalTensor weight = unpack_optional(args[2]), bias = unpack_optional(args[4]);
  const double eps = PyFloat_AS_DOUBLE(args[3]);
  return wrap(without_gil([&] { return std::get<0>(op.call(x, shape, weight, eps, bias)); }));
  END_HANDLE_TH_ERRORS
}

// ----------------------------------------------------------------------------- reductions

// int[]?: None or a list of Python ints.
bool optional_int_list(PyObject* obj, std::optional<c10::SmallVector<int64_t, 4>>* out) {
  if (obj == Py_None) return true;
  out->emplace();
  return int_list(obj, &**out);
}

at::OptionalIntArrayRef dims_ref(const std::optional<c10::SmallVector<int64_t, 4>>& dims) {
  if (!dims) return std::nullopt;
  return c10::IntArrayRef(*dims);
}

// The reductions' schemas: (input, int[]? dim, bool keepdim), sum's and mean's keyword dtype left
// None; argmax / argmin's (input, int? dim, bool keepdim); the moments' (input, int[]? dim, float
// correction, bool keepdim), var_mean / std_mean returning two tensors.
enum class ReduceForm { kDims, kDimsDtype, kIndex, kMoment, kMomentPair };

struct ReduceEntry {
  const char* op;
  ReduceForm form;
};
constexpr ReduceEntry kReduceEntries[] = {
    {"reducekit::sum", ReduceForm::kDimsDtype},       {"reducekit::mean", ReduceForm::kDimsDtype},
    {"reducekit::prod", ReduceForm::kDims},           {"reducekit::amax", ReduceForm::kDims},
    {"reducekit::amin", ReduceForm::kDims},           {"reducekit::logsumexp", ReduceForm::kDims},
    {"reducekit::argmax", ReduceForm::kIndex},        {"reducekit::argmin", ReduceForm::kIndex},
    {"reducekit::var", ReduceForm::kMoment},          {"reducekit::std", ReduceForm::kMoment},
    {"reducekit::var_mean", ReduceForm::kMomentPair}, {"reducekit::std_mean", ReduceForm::kMomentPair},
};

// reducekit.<op>(input, dim, keepdim) or, for the moments, (input, dim, correction, keepdim).
template <int kEntry> PyObject* reduction(PyObject*, PyObject* const* args, Py_ssize_t n) {
  HANDLE_TH_ERRORS
  constexpr ReduceEntry entry = kReduceEntries[kEntry];
  constexpr bool kMoment = entry.form == ReduceForm::kMoment || entry.form == ReduceForm::kMomentPair;
  if (n != (kMoment ? 4 : 3) || !plain_tensor(args[0]) || !PyBool_Check(args[n - 1]) ||
      (kMoment && !PyFloat_Check(args[2])))
    Py_RETURN_NOTIMPLEMENTED;
  const at::Tensor& x = THPVariable_Unpack(args[0]);
  const bool keepdim = args[n - 1] == Py_True;
  if constexpr (entry.form == ReduceForm::kIndex) {
    if (args[1] != Py_None && !THPUtils_checkLong(args[1])) Py_RETURN_NOTIMPLEMENTED;
    const std::optional<int64_t> dim =
        args[1] == Py_None ? std::nullopt : std::optional<int64_t>(THPUtils_unpackLong(args[1]));
    static const auto op = find_op<at::Tensor(const at::Tensor&, std::optional<int64_t>, bool)>(entry.op);
    return wrap(without_gil([&] { return op.call(x, dim, keepdim); }));
  } else {
    std::optional<c10::SmallVector<int64_t, 4>> dims;
    if (!optional_int_list(args[1], &dims)) Py_RETURN_NOTIMPLEMENTED;
    if constexpr (entry.form == ReduceForm::kDims) {
      static const auto op = find_op<at::Tensor(const at::Tensor&, at::OptionalIntArrayRef, bool)>(entry.op);
      return wrap(without_gil([&] { return op.call(x, dims_ref(dims), keepdim); }));
    } else if constexpr (entry.form == ReduceForm::kDimsDtype) {
      static const auto op = find_op<at::Tensor(const at::Tensor&, at::OptionalIntArrayRef, bool,
                                                std::optional<at::ScalarType>)>(entry.op);
      return wrap(without_gil([&] { return op.call(x, dims_ref(dims), keepdim, std::nullopt); }));
    } else {
      const double correction = PyFloat_AS_DOUBLE(args[2]);
      if constexpr (entry.form == ReduceForm::kMoment) {
        static const auto op =
            find_op<at::Tensor(const at::Tensor&, at::OptionalIntArrayRef, double, bool)>(entry.op);
        return wrap(without_gil([&] { return op.call(x, dims_ref(dims), correction, keepdim); }));
      } else {
        static const auto op = find_op<std::tuple<at::Tensor, at::Tensor>(
            const at::Tensor&, at::OptionalIntArrayRef, double, bool)>(entry.op);
        auto [first, mean] = without_gil([&] { return op.call(x, dims_ref(dims), correction, keepdim); });
        return pair(std::move(first), std::move(mean));
      }
    }
  }
  END_HANDLE_TH_ERRORS
}

template <int kEntry> PyMethodDef reduction_method() {
  constexpr const char* name = kReduceEntries[kEntry].op + sizeof("reducekit::") - 1;
  return {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&reduction<kEntry>)), METH_FASTCALL,
          "the reduction's eager call (reducekit._reduce), or NotImplemented"};
}

PyMethodDef methods[] = {
    {"softmax", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&rowwise<false>)), METH_FASTCALL,
     "softmax(input, dim): torch.ops.reducekit.softmax's eager call, or NotImplemented"},
    {"log_softmax", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&rowwise<true>)), METH_FASTCALL,
     "log_softmax(input, dim): torch.ops.reducekit.log_softmax's eager call, or NotImplemented"},
    {"layer_norm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&layer_norm)), METH_FASTCALL,
     "layer_norm(input, normalized_shape, weight, bias, eps): the y of torch.ops.reducekit.layer_norm, or NotImplemented"},
    {"rms_norm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&rms_norm)), METH_FASTCALL,
     "rms_norm(input, normalized_shape, weight, eps, bias): the y of torch.ops.reducekit.rms_norm, or NotImplemented"},
    reduction_method<0>(),
    reduction_method<1>(),
    reduction_method<2>(),
    reduction_method<3>(),
    reduction_method<4>(),
    reduction_method<5>(),
    reduction_method<6>(),
    reduction_method<7>(),
    reduction_method<8>(),
    reduction_method<9>(),
    reduction_method<10>(),
    reduction_method<11>(),
    {nullptr, nullptr, 0, nullptr}};
static_assert(std::size(kReduceEntries) == 12, "every reduction has its method");

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_eager", "reducekit's eager entries (python/csrc/eager_entry.cpp)", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit__eager() { return PyModule_Create(&module); }
