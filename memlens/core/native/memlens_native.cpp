// memlens' native helpers: the per-tensor work of a measured step, out of Python.
//
//   Recorder      precise mode: every allocation and free of the CPU allocator (below)
//   SavedTracker  the saved-tensor pack/unpack hooks and what they keep alive
//   GradWatch     each gradient's sum of squares as autograd writes it; the gradients'
//                 storages in one pass
//   count_graph_nodes  the autograd graph's size without a Python object per node
//   CallTracker   a watch's forward calls: reached by backward (how often), still alive
//   format_rows   a run folder's CSV rows as text, formatted with the GIL let go
//   held_attributes  the models' attributes a module-cache scan looks at
//
// One translation unit in several files, by concern, each included below inside the
// anonymous namespace: recorder.h (Recorder), saved_tracker.h (SavedTracker), grad_watch.h
// (GradWatch, LightProbe, count_graph_nodes), fast_calls.h (the phase edges' C calls),
// call_tracker.h (CallTracker), csv_rows.h (format_rows), module_attrs.h
// (held_attributes); this file holds the includes and the Python module.
//
// Built by core/native/__init__.py against the installed torch; core/ has the same code in
// Python for where no compiler is found, and tests/core/test_native.py holds the two to the
// same figures.
//
// Recorder. c10 tells the memory profiler about each allocation and free through the
// MemoryReportingInfoBase that is current in the thread's ThreadLocalDebugInfo (this is how
// torch.profiler(profile_memory=True) sees memory). A Recorder pushed there gets the same
// calls without the profiler's per-op recording: a map insert or erase per event, plus the
// Python stack on the owning thread: the newest kStackFrames frames outside torch and
// memlens' own files, walked here and kept once per distinct stack (a training loop
// allocates from the same few lines step after step), so an event carries a stack id.
//
// Only the thread that started the Recorder (and threads autograd hands its state to) report
// to it. Everything that touches Python objects runs with the GIL held.

#include <Python.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <ATen/SequenceNumber.h>
#include <c10/core/Allocator.h>
#include <c10/util/Logging.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/autograd/python_variable.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

#include "recorder.h"
#include "saved_tracker.h"
#include "grad_watch.h"
#include "fast_calls.h"
#include "csv_rows.h"
#include "module_attrs.h"
#include "call_tracker.h"

}  // namespace

PYBIND11_MODULE(memlens_native, m) {
  m.doc() = "memlens native helpers: allocator events, graph node counts";
  // A plain C function: the loop calls it between forward and backward (see bind_fast).
  PyObject* count = PyCFunction_NewEx(&count_graph_nodes_def, nullptr, m.ptr());
  if (count == nullptr) {
    throw py::error_already_set();
  }
  m.add_object("count_graph_nodes", py::reinterpret_steal<py::object>(count));
  m.def("format_rows", &format_rows, py::arg("rows"), py::arg("kinds"), py::arg("names"));
  m.def("held_attributes", &held_attributes, py::arg("roots"), py::arg("holders"));

  py::class_<GradWatch>(m, "GradWatch")
      .def(py::init<const py::list&>())
      .def("uninstall", &GradWatch::uninstall)
      .def("forget", &GradWatch::forget)
      .def("set_param_keys", &GradWatch::set_param_keys)
      .def("grad_storages", &GradWatch::grad_storages)
      .def("fast_functions", [](py::object self) {
        // (install, sum_of_squares) as plain C functions, for the loop's every step.
        return bound_functions<GradWatch>(self, {&watch_install_def, &watch_sum_def});
      });

  py::class_<LightProbe>(m, "LightProbe")
      .def(py::init<py::object, py::object>(), py::arg("watch"), py::arg("saved"))
      .def("fast_sample", [](py::object self) {
        // sample as a plain C function (the loop's samples outside the edges).
        return py::object(bound_functions<LightProbe>(self, {&light_sample_def})[0]);
      })
      .def("set_rules", &LightProbe::set_rules, py::arg("grads"), py::arg("optimizer"),
           py::arg("heap"), py::arg("preset"), py::arg("t0"))
      .def("set_gathered", &LightProbe::set_gathered, py::arg("refs"))
      .def("set_grad_holders", &LightProbe::set_grad_holders, py::arg("refs"), py::arg("attr"))
      .def("set_precise", &LightProbe::set_precise, py::arg("recorder"),
           py::arg("activations"), py::arg("grads"), py::arg("optimizer"))
      .def_static("clock", &LightProbe::clock)
      .def("fast_edges", [](py::object self) {
        // (edge, take) as plain C functions: edge runs at every phase edge.
        return bound_functions<LightProbe>(self, {&light_edge_def, &light_take_def});
      });

  py::class_<CallTracker>(m, "CallTracker")
      .def(py::init<>())
      .def("__len__", &CallTracker::size)
      .def("freed", &CallTracker::freed, py::arg("handle"))
      .def("reaches", &CallTracker::reaches, py::arg("handles"), py::arg("tensor"),
           py::arg("limit"))
      .def("fast_functions", [](py::object self) {
        // (track, fired, alive, release, unreleased) as plain C functions: track runs at
        // every forward, unreleased at the end of every step without detail.
        return bound_functions<CallTracker>(
            self, {&calls_track_def, &calls_fired_def, &calls_alive_def, &calls_release_def,
                   &calls_unreleased_def});
      });

  SavedHolderType.tp_name = "memlens_native.SavedHolder";
  SavedHolderType.tp_basicsize = sizeof(SavedHolder);
  SavedHolderType.tp_dealloc = saved_holder_dealloc;
  SavedHolderType.tp_flags = Py_TPFLAGS_DEFAULT;
  SavedHolderType.tp_doc = "what memlens' pack hook gives autograd to keep";
  if (PyType_Ready(&SavedHolderType) < 0) {
    throw py::error_already_set();
  }
  py::class_<SavedTracker, std::shared_ptr<SavedTracker>>(m, "SavedTracker")
      .def(py::init<>())
      .def("set_param_ptrs", &SavedTracker::set_param_ptrs)
      .def("set_leaf_params", &SavedTracker::set_leaf_params)
      .def("contains", &SavedTracker::contains)
      .def("counted_part", &SavedTracker::counted_part)
      .def("set_error_text", &SavedTracker::set_error_text)
      .def("keys", &SavedTracker::keys)
      .def("partial_storages", &SavedTracker::partial_storages)
      .def_property_readonly("live_bytes", &SavedTracker::live_bytes)
      .def("fast_functions", [](py::object self) {
        // (new_step, end_step, counts) as plain C functions, for the loop's every step.
        return bound_functions<SavedTracker>(
            self, {&saved_new_step_def, &saved_end_step_def, &saved_counts_def});
      })
      .def("hook_functions", [](std::shared_ptr<SavedTracker> self) {
        // The hooks' `self`: a capsule with its own reference to the tracker, so holders
        // that outlive the Python tracker object (a kept graph) still find it.
        PyObject* capsule = PyCapsule_New(
            new std::shared_ptr<SavedTracker>(std::move(self)), kCapsule, [](PyObject* c) {
              delete static_cast<std::shared_ptr<SavedTracker>*>(
                  PyCapsule_GetPointer(c, kCapsule));
            });
        if (capsule == nullptr) {
          throw py::error_already_set();
        }
        PyObject* pack = PyCFunction_New(&pack_def, capsule);
        PyObject* unpack = PyCFunction_New(&unpack_def, capsule);
        Py_DECREF(capsule);
        if (pack == nullptr || unpack == nullptr) {
          Py_XDECREF(pack);
          Py_XDECREF(unpack);
          throw py::error_already_set();
        }
        return py::make_tuple(py::reinterpret_steal<py::object>(pack),
                              py::reinterpret_steal<py::object>(unpack));
      });
  py::class_<Recorder, std::shared_ptr<Recorder>>(m, "Recorder")
      .def(py::init(&make_recorder), py::arg("t0_us"), py::arg("with_frames"),
           py::arg("internal"))
      .def("start", &Recorder::start)
      .def("stop", &Recorder::stop)
      .def("track", &Recorder::track)
      .def("freed", &Recorder::freed)
      .def("contains", &Recorder::contains)
      .def("begin_phase", &Recorder::begin_phase)
      .def("reset_peak", &Recorder::reset_peak)
      .def_property_readonly("live_bytes", &Recorder::live_bytes)
      .def_property_readonly("peak_bytes", &Recorder::peak_bytes)
      .def_property_readonly("pending", &Recorder::pending)
      .def("classify", py::overload_cast<const std::vector<std::pair<int64_t, int64_t>>&, int>(
                           &Recorder::classify))
      .def("drain", &Recorder::drain)
      .def("clear", &Recorder::clear);
}
