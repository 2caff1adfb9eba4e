// Part of memlens_native.cpp, included inside its anonymous namespace (one translation
// unit, built as one module): a watch's forward calls, followed into backward without a
// Python object. Not a standalone header: it relies on the includes and the helpers before it.

// --- forward calls: did backward reach their graph, and is it still alive? ------------------
//
// A watch asks two things of each root forward call (a model's output): whether a backward
// reached its graph (in how many backward passes: two is "backward through the graph a second time"),
// and whether the graph is still alive. In Python that took a pre-hook on each output's
// autograd node (node.register_prehook: a RemovableHandle made in Python, 5-26 us a call,
// and a Python call with the gradients wrapped at backward) and a marker in the node's
// metadata. Here the pre-hook is a C++ FunctionPreHook that adds one to a counter (no GIL,
// no Python object), and "alive" is a weak pointer to each node: nothing here keeps a
// user's graph alive, and a node's hook dies with it.

// NodePtr and WeakNodePtr: saved_tracker.h.

struct CallCount {
  std::atomic<int64_t> fired{0};  // backward passes that reached the call
  std::atomic<int64_t> freed{0};  // of them, those without retain_graph (what they ran through is released)
  std::atomic<int> task{-1};      // the last one's graph task
};

class CountingPreHook : public torch::autograd::FunctionPreHook {
 public:
  explicit CountingPreHook(std::shared_ptr<CallCount> count) : count_(std::move(count)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& grads) override {
    // A call's outputs may be several nodes (logits and a hidden state): one backward
    // that reaches two of them reached the call once.
    const int task = torch::autograd::get_current_graph_task_id();
    if (task < 0 || count_->task.exchange(task, std::memory_order_relaxed) != task) {
      count_->fired.fetch_add(1, std::memory_order_relaxed);
      if (!torch::autograd::get_current_graph_task_keep_graph()) {
        count_->freed.fetch_add(1, std::memory_order_relaxed);
      }
    }
    return grads;
  }
  // Compiled autograd asks each hook to register itself; this one has nothing to compile,
  // so it registers nothing (the count then stays as it was). Without `override`: where a
  // torch declares it otherwise this is an unrelated overload, not a build error.
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& /*args*/) const {}

 private:
  std::shared_ptr<CallCount> count_;
};

class CallTracker {
 public:
  // Puts the counting hook on the autograd node of each tensor in `output` (a tensor, or
  // tensors in tuples, lists and dicts nested up to three deep, 16 items of each: what
  // memlens.core.watch.session._output_nodes looks at), each node once. Returns the call's
  // handle, or -1 where no output has a node (nothing of it can be backwarded).
  int64_t track(PyObject* output) {
    std::vector<NodePtr> nodes;
    collect(output, 0, &nodes);
    if (nodes.empty()) {
      return -1;
    }
    Call call;
    call.count = std::make_shared<CallCount>();
    for (auto& node : nodes) {
      node->add_pre_hook(std::make_unique<CountingPreHook>(call.count));
      call.nodes.emplace_back(WeakNodePtr(node));
    }
    int64_t handle;
    if (!free_.empty()) {
      handle = free_.back();
      free_.pop_back();
      calls_[static_cast<size_t>(handle)] = std::move(call);
    } else {
      handle = static_cast<int64_t>(calls_.size());
      calls_.push_back(std::move(call));
    }
    return handle;
  }

  // How many times backward reached one of the call's nodes.
  int64_t fired(int64_t h) const { return at(h).count->fired.load(std::memory_order_relaxed); }

  // How many of those backward passes released what they ran through (no retain_graph).
  int64_t freed(int64_t h) const { return at(h).count->freed.load(std::memory_order_relaxed); }

  // Whether any of the call's nodes is still alive (its graph not freed).
  bool alive(int64_t h) const {
    for (const auto& n : at(h).nodes) {
      if (!n.expired()) {
        return true;
      }
    }
    return false;
  }

  void release(int64_t h) {
    at(h);  // checks the handle
    calls_[static_cast<size_t>(h)] = Call{};
    free_.push_back(h);
  }

  // Of `handles`, those whose graph is alive unreleased (never backwarded, or only with
  // retain_graph=True); the others are let go. One call a step (a watch's steps without
  // detail: CallBook.carried_graphs_alive), where three a handle ran cold after the step's
  // kernels (the pybind11 `freed` alone took 8.6 us in place on a 4 ms MLP step).
  std::vector<int64_t> unreleased(const std::vector<int64_t>& handles) {
    std::vector<int64_t> left;
    for (int64_t h : handles) {
      if (freed(h) == 0 && alive(h)) {
        left.push_back(h);
      } else {
        release(h);
      }
    }
    return left;
  }

  size_t size() const { return calls_.size() - free_.size(); }

  // Whether the graph of `tensor` reaches a node of one of the calls `handles` (looking at
  // up to `limit` nodes): what names the holder of graphs a loop keeps.
  bool reaches(const std::vector<int64_t>& handles, py::handle tensor, int64_t limit) const {
    if (!THPVariable_Check(tensor.ptr())) {
      return false;
    }
    std::unordered_set<const torch::autograd::Node*> targets;
    for (int64_t h : handles) {
      for (const auto& weak : at(h).nodes) {
        if (auto node = weak.lock()) {
          targets.insert(node.get());
        }
      }
    }
    const auto root = THPVariable_Unpack(tensor.ptr()).grad_fn();
    if (!root || targets.empty()) {
      return false;
    }
    std::vector<torch::autograd::Node*> stack{root.get()};
    std::unordered_set<torch::autograd::Node*> seen{root.get()};
    while (!stack.empty() && static_cast<int64_t>(seen.size()) <= limit) {
      torch::autograd::Node* node = stack.back();
      stack.pop_back();
      if (targets.count(node)) {
        return true;
      }
      for (const auto& edge : node->next_edges()) {
        torch::autograd::Node* next = edge.function.get();
        if (next != nullptr && seen.insert(next).second) {
          stack.push_back(next);
        }
      }
    }
    return false;
  }

 private:
  struct Call {
    std::vector<WeakNodePtr> nodes;
    std::shared_ptr<CallCount> count;
  };

  const Call& at(int64_t h) const {
    if (h < 0 || h >= static_cast<int64_t>(calls_.size()) ||
        !calls_[static_cast<size_t>(h)].count) {
      throw py::value_error("no such call: " + std::to_string(h));
    }
    return calls_[static_cast<size_t>(h)];
  }

  static void add(const NodePtr& node,
                  std::vector<NodePtr>* out) {
    if (!node) {
      return;
    }
    for (const auto& n : *out) {
      if (n == node) {
        return;
      }
    }
    out->push_back(node);
  }

  static void collect(PyObject* obj, int depth,
                      std::vector<NodePtr>* out) {
    if (THPVariable_Check(obj)) {
      add(THPVariable_Unpack(obj).grad_fn(), out);
      return;
    }
    if (depth >= 3) {
      return;
    }
    if (PyTuple_Check(obj) || PyList_Check(obj)) {
      PyObject* seq = obj;
      const Py_ssize_t n = std::min<Py_ssize_t>(PySequence_Fast_GET_SIZE(seq), 16);
      for (Py_ssize_t i = 0; i < n; ++i) {
        collect(PySequence_Fast_GET_ITEM(seq, i), depth + 1, out);
      }
    } else if (PyDict_Check(obj)) {
      PyObject *key, *value;
      Py_ssize_t pos = 0;
      int k = 0;
      while (k < 16 && PyDict_Next(obj, &pos, &key, &value)) {
        collect(value, depth + 1, out);
        ++k;
      }
    }
  }

  std::vector<Call> calls_;
  std::vector<int64_t> free_;
};

// track(output) -> handle or -1; fired(handle) -> int; alive(handle) -> bool;
// release(handle); unreleased(handles) -> handles: as plain C functions (see bind_fast),
// track at every root forward, unreleased at the end of every step without detail.
PyObject* calls_track_fast(PyObject* self, PyObject* arg) {
  return guarded([&]() -> PyObject* {
    return PyLong_FromLongLong(bound_object<CallTracker>(self)->track(arg));
  });
}

int64_t handle_of(PyObject* arg) {
  const long long h = PyLong_AsLongLong(arg);
  if (h == -1 && PyErr_Occurred()) {
    throw py::error_already_set();
  }
  return h;
}

PyObject* calls_fired_fast(PyObject* self, PyObject* arg) {
  return guarded([&]() -> PyObject* {
    return PyLong_FromLongLong(bound_object<CallTracker>(self)->fired(handle_of(arg)));
  });
}

PyObject* calls_alive_fast(PyObject* self, PyObject* arg) {
  return guarded([&]() -> PyObject* {
    return PyBool_FromLong(bound_object<CallTracker>(self)->alive(handle_of(arg)) ? 1 : 0);
  });
}

PyObject* calls_release_fast(PyObject* self, PyObject* arg) {
  return guarded([&]() -> PyObject* {
    bound_object<CallTracker>(self)->release(handle_of(arg));
    Py_RETURN_NONE;
  });
}

PyObject* calls_unreleased_fast(PyObject* self, PyObject* arg) {
  return guarded([&]() -> PyObject* {
    if (!PyList_Check(arg)) {
      PyErr_SetString(PyExc_TypeError, "CallTracker.unreleased takes a list of handles");
      return nullptr;
    }
    std::vector<int64_t> handles;
    handles.reserve(static_cast<size_t>(PyList_GET_SIZE(arg)));
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(arg); ++i) {
      handles.push_back(handle_of(PyList_GET_ITEM(arg, i)));
    }
    const std::vector<int64_t> left = bound_object<CallTracker>(self)->unreleased(handles);
    PyObject* out = PyList_New(static_cast<Py_ssize_t>(left.size()));
    if (out == nullptr) {
      return nullptr;
    }
    for (size_t i = 0; i < left.size(); ++i) {
      PyObject* item = PyLong_FromLongLong(left[i]);
      if (item == nullptr) {
        Py_DECREF(out);
        return nullptr;
      }
      PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), item);
    }
    return out;
  });
}

PyMethodDef calls_track_def = {"track", calls_track_fast, METH_O, "CallTracker.track"};
PyMethodDef calls_fired_def = {"fired", calls_fired_fast, METH_O, "CallTracker.fired"};
PyMethodDef calls_alive_def = {"alive", calls_alive_fast, METH_O, "CallTracker.alive"};
PyMethodDef calls_release_def = {"release", calls_release_fast, METH_O, "CallTracker.release"};
PyMethodDef calls_unreleased_def = {"unreleased", calls_unreleased_fast, METH_O,
                                    "CallTracker.unreleased"};
