// Part of memlens_native.cpp, included inside its anonymous namespace (one translation
// unit, built as one module): the calls of every phase edge as plain C functions, without pybind11's dispatch.
// Not a standalone header: it relies on the includes and the helpers before it.

// --- the calls of every phase edge, without pybind11's dispatch ---------------------------
//
// pybind11 finds a call's overload and converts its arguments through its type registry.
// Warm that is about a microsecond; right after a phase's kernels, when none of the registry
// is in cache, a pybind11 call that did nothing took 21 us and a plain C function 5 us (gan,
// between backward and the next step). The loop's per-phase calls are plain C functions
// (METH_FASTCALL / METH_NOARGS), each bound to its object by a capsule that keeps the Python
// object alive: `fast_*()` on the pybind11 classes hands them out.

struct Bound {
  PyObject* owner;  // the pybind11 object (a strong reference)
  void* ptr;        // its C++ object
};

const char* kBound = "memlens_native.Bound";

PyObject* bind_fast(const py::object& owner, void* ptr, PyMethodDef* def) {
  auto* b = new Bound{owner.inc_ref().ptr(), ptr};
  PyObject* capsule = PyCapsule_New(b, kBound, [](PyObject* c) {
    auto* bound = static_cast<Bound*>(PyCapsule_GetPointer(c, kBound));
    Py_XDECREF(bound->owner);
    delete bound;
  });
  if (capsule == nullptr) {
    Py_DECREF(b->owner);
    delete b;
    throw py::error_already_set();
  }
  PyObject* f = PyCFunction_New(def, capsule);
  Py_DECREF(capsule);
  if (f == nullptr) {
    throw py::error_already_set();
  }
  return f;
}

// The object's C functions `defs`, each bound to it (bind_fast), as a tuple: what the
// `fast_*()` methods hand out.
template <typename T>
py::tuple bound_functions(const py::object& owner, std::initializer_list<PyMethodDef*> defs) {
  auto* ptr = owner.cast<T*>();
  py::tuple out(defs.size());
  size_t i = 0;
  for (PyMethodDef* def : defs) {
    out[i++] = py::reinterpret_steal<py::object>(bind_fast(owner, ptr, def));
  }
  return out;
}

template <typename T>
T* bound_object(PyObject* capsule) {
  return static_cast<T*>(static_cast<Bound*>(PyCapsule_GetPointer(capsule, kBound))->ptr);
}

// Runs `body` (returning a new reference); C++ and pybind11 errors become Python errors.
template <typename F>
PyObject* guarded(F&& body) {
  try {
    return body();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// LightProbe.sample(scan_grads, states, carried, heap) as a C function.
PyObject* light_sample_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return guarded([&]() -> PyObject* {
    if (nargs != 4 || !PyList_Check(args[2])) {
      PyErr_SetString(PyExc_TypeError, "sample(scan_grads, states, carried: list, heap)");
      return nullptr;
    }
    const int scan = PyObject_IsTrue(args[0]);
    const int heap = PyObject_IsTrue(args[3]);
    if (scan < 0 || heap < 0) {
      return nullptr;
    }
    const auto v = bound_object<LightProbe>(self)->sample(
        scan != 0, py::reinterpret_borrow<py::object>(args[1]),
        py::reinterpret_borrow<py::list>(args[2]), heap != 0);
    return Py_BuildValue("(LLLLLLL)", static_cast<long long>(v[0]),
                         static_cast<long long>(v[1]), static_cast<long long>(v[2]),
                         static_cast<long long>(v[3]), static_cast<long long>(v[4]),
                         static_cast<long long>(v[5]), static_cast<long long>(v[6]));
  });
}

// LightProbe.edge(code, carried: list[, heap: int]) as a C function.
PyObject* light_edge_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return guarded([&]() -> PyObject* {
    if (nargs < 2 || nargs > 4 || !PyLong_Check(args[0]) || !PyList_Check(args[1]) ||
        (nargs >= 3 && !PyLong_Check(args[2])) || (nargs == 4 && !PyLong_Check(args[3]))) {
      PyErr_SetString(PyExc_TypeError,
                      "edge(code: int, carried: list[, heap: int[, rescan: int]])");
      return nullptr;
    }
    const long code = PyLong_AsLong(args[0]);
    const long heap = nargs >= 3 ? PyLong_AsLong(args[2]) : -1;
    const long rescan = nargs == 4 ? PyLong_AsLong(args[3]) : 0;
    if ((code == -1 || heap == -1 || rescan == -1) && PyErr_Occurred()) {
      return nullptr;
    }
    bound_object<LightProbe>(self)->edge(static_cast<int>(code),
                                          py::reinterpret_borrow<py::list>(args[1]),
                                          static_cast<int>(heap), static_cast<int>(rescan));
    Py_RETURN_NONE;
  });
}
PyObject* light_take_fast(PyObject* self, PyObject* /*unused*/) {
  return guarded([&]() -> PyObject* { return bound_object<LightProbe>(self)->take(); });
}

PyObject* watch_install_fast(PyObject* self, PyObject* /*unused*/) {
  return guarded([&]() -> PyObject* {
    bound_object<GradWatch>(self)->install();
    Py_RETURN_NONE;
  });
}

PyObject* watch_sum_of_squares_fast(PyObject* self, PyObject* /*unused*/) {
  return guarded([&]() -> PyObject* {
    return PyFloat_FromDouble(bound_object<GradWatch>(self)->sum_of_squares_now());
  });
}

PyObject* saved_new_step_fast(PyObject* self, PyObject* /*unused*/) {
  bound_object<SavedTracker>(self)->new_step();
  Py_RETURN_NONE;
}

PyObject* saved_end_step_fast(PyObject* self, PyObject* /*unused*/) {
  bound_object<SavedTracker>(self)->end_step();
  Py_RETURN_NONE;
}

// (bytes first saved by this step, bytes of holders kept from earlier steps)
PyObject* saved_counts_fast(PyObject* self, PyObject* /*unused*/) {
  const auto* t = bound_object<SavedTracker>(self);
  return Py_BuildValue("(LL)", static_cast<long long>(t->step_saved_bytes()),
                       static_cast<long long>(t->retained_bytes()));
}

PyMethodDef light_sample_def = {"sample", reinterpret_cast<PyCFunction>(light_sample_fast),
                                METH_FASTCALL, "LightProbe.sample without pybind11"};
PyMethodDef light_edge_def = {"edge", reinterpret_cast<PyCFunction>(light_edge_fast),
                              METH_FASTCALL, "LightProbe.edge without pybind11"};
PyMethodDef light_take_def = {"take", light_take_fast, METH_NOARGS,
                              "LightProbe.take without pybind11"};
PyMethodDef watch_install_def = {"install", watch_install_fast, METH_NOARGS,
                                 "GradWatch.install without pybind11"};
PyMethodDef watch_sum_def = {"sum_of_squares", watch_sum_of_squares_fast, METH_NOARGS,
                             "GradWatch.sum_of_squares without pybind11"};
PyMethodDef saved_new_step_def = {"new_step", saved_new_step_fast, METH_NOARGS,
                                  "SavedTracker.new_step without pybind11"};
PyMethodDef saved_end_step_def = {"end_step", saved_end_step_fast, METH_NOARGS,
                                  "SavedTracker.end_step without pybind11"};
PyMethodDef saved_counts_def = {"counts", saved_counts_fast, METH_NOARGS,
                                "(step_saved_bytes, retained_bytes) without pybind11"};

// Autograd nodes reachable from the roots' grad_fn (each once), up to `limit`: what
// core.loop.count_graph_nodes walks through next_functions in Python, without making a
// Python object per node.
int64_t count_graph_nodes(const py::list& roots, int64_t limit) {
  using torch::autograd::Node;
  std::vector<Node*> stack;
  stack.reserve(256);
  PointerSet seen(256);
  for (const auto& r : roots) {
    if (!THPVariable_Check(r.ptr())) {
      throw py::type_error("count_graph_nodes takes tensors");
    }
    Node* fn = THPVariable_Unpack(r.ptr()).grad_fn().get();
    if (fn != nullptr && seen.insert(fn)) {
      stack.push_back(fn);
    }
  }
  while (!stack.empty() && static_cast<int64_t>(seen.size()) < limit) {
    Node* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) {
      Node* next = edge.function.get();
      if (next != nullptr && seen.insert(next)) {
        stack.push_back(next);
      }
    }
  }
  return std::min(static_cast<int64_t>(seen.size()), limit);
}

PyObject* count_graph_nodes_fast(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  return guarded([&]() -> PyObject* {
    if (nargs != 2 || !PyList_Check(args[0])) {
      PyErr_SetString(PyExc_TypeError, "count_graph_nodes(roots: list, limit: int)");
      return nullptr;
    }
    const int64_t limit = PyLong_AsLongLong(args[1]);
    if (limit == -1 && PyErr_Occurred()) {
      return nullptr;
    }
    return PyLong_FromLongLong(
        count_graph_nodes(py::reinterpret_borrow<py::list>(args[0]), limit));
  });
}

PyMethodDef count_graph_nodes_def = {
    "count_graph_nodes", reinterpret_cast<PyCFunction>(count_graph_nodes_fast), METH_FASTCALL,
    "count_graph_nodes(roots, limit): autograd nodes reachable from the roots, up to limit"};
