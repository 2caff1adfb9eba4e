// Part of memlens_native.cpp, included inside its anonymous namespace (one translation
// unit, built as one module): the gradient norm as autograd writes each gradient (GradWatch), a light-mode sample in one call (LightProbe), and the graph node count.
// Not a standalone header: it relies on the includes and the helpers before it.

// --- the gradient norm, taken while each gradient is still in cache -------------------------
//
// The loop reports the 2-norm of all gradients after backward. Read back afterwards, the
// gradients come from memory (the kernels in between evicted them); a post-accumulate-grad
// hook on each parameter squares and sums its gradient right after autograd wrote it. At
// read time a parameter's value is used only if its gradient is still the same tensor at the
// same version; otherwise (a user's own hook replaced ours, an in-place change, a dtype or
// device the hook does not handle) it is computed then.

// Sum of squares of n floats, in float lanes flushed to double every block. Compiled twice:
// for the baseline x86-64 (SSE2, 4 lanes) and for AVX2 with FMA (8 lanes, fused), chosen
// once at run time. Where the gradient was just written it is in cache, and the SSE2 loop
// was the bound: mlp's 662k gradients took 0.17 ms a step.
template <int Lanes>
inline double sum_squares_floats(const float* p, int64_t n) {
  double total = 0.0;
  int64_t i = 0;
  while (i < n) {
    const int64_t end = std::min(n, i + 4096);
    float acc[Lanes] = {0};
    for (; i + Lanes <= end; i += Lanes) {
      for (int k = 0; k < Lanes; ++k) {
        acc[k] += p[i + k] * p[i + k];
      }
    }
    for (; i < end; ++i) {
      acc[0] += p[i] * p[i];
    }
    for (float a : acc) {
      total += a;
    }
  }
  return total;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) double sum_squares_floats_avx2(const float* p, int64_t n) {
  return sum_squares_floats<32>(p, n);
}
const bool kHaveAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif

double sum_squares_float_array(const float* p, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (kHaveAvx2) {
    return sum_squares_floats_avx2(p, n);
  }
#endif
  return sum_squares_floats<16>(p, n);
}

// Sum of squares of a contiguous CPU float32/float64 tensor; false for anything else, and
// for one whose storage holds no data (a wrapper subclass such as DTensor, whose bytes are
// inside it; a storage FSDP freed): never read through, never raised about (this runs in
// autograd's hooks, without the GIL: a wrapper is unwrapped by the caller that holds it).
bool sum_of_squares(const at::Tensor& g, double* out) {
  if (!g.defined() || !g.device().is_cpu() || g.layout() != c10::kStrided || !g.is_contiguous()) {
    return false;
  }
  if (g.numel() != 0 && (!g.has_storage() || g.storage().data() == nullptr)) {
    return false;
  }
  const int64_t n = g.numel();
  double total = 0.0;
  if (g.scalar_type() == at::kFloat) {
    total = sum_squares_float_array(g.const_data_ptr<float>(), n);
  } else if (g.scalar_type() == at::kDouble) {
    const double* p = g.const_data_ptr<double>();
    for (int64_t i = 0; i < n; ++i) {
      total += p[i] * p[i];
    }
  } else {
    return false;
  }
  *out = total;
  return true;
}

struct GradSlot {
  const c10::TensorImpl* impl = nullptr;
  const void* data = nullptr;
  int64_t version = -1;
  double sumsq = 0.0;
};

struct GradSlots {
  std::vector<GradSlot> slots;
};

class SumSquaresHook : public torch::autograd::PostAccumulateGradHook {
 public:
  SumSquaresHook(std::shared_ptr<GradSlots> slots, size_t index)
      : slots_(std::move(slots)), index_(index) {}

  // Compiled autograd asks each hook to register itself: this one only reads, so it
  // registers nothing (the sum is then computed when asked). Not `override`: where a torch
  // declares it otherwise this is an unrelated overload, not a build error.
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& /*args*/) const {}

  void operator()(const torch::autograd::Variable& param) override {
    const at::Tensor& g = param.grad();
    GradSlot& slot = slots_->slots[index_];
    double v = 0.0;
    if (sum_of_squares(g, &v)) {
      slot = GradSlot{g.unsafeGetTensorImpl(), g.const_data_ptr(), g._version(), v};
    } else {
      slot = GradSlot{};
    }
  }

 private:
  std::shared_ptr<GradSlots> slots_;
  size_t index_;
};

class GradWatch {
 public:
  explicit GradWatch(const py::list& params) : slots_(std::make_shared<GradSlots>()) {
    for (const auto& p : params) {
      if (!THPVariable_Check(p.ptr())) {
        throw py::type_error("GradWatch takes parameters");
      }
      params_.push_back(THPVariable_Unpack(p.ptr()));
    }
    slots_->slots.resize(params_.size());
    hooks_.resize(params_.size(), nullptr);
  }

  ~GradWatch() { uninstall(); }

  // Puts the hook on every parameter that has no post-accumulate-grad hook of its own.
  void install() {
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& current = torch::autograd::impl::post_acc_grad_hooks(params_[i]);
      if (current == nullptr && params_[i].requires_grad()) {
        auto hook = std::make_unique<SumSquaresHook>(slots_, i);
        hooks_[i] = hook.get();
        torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::move(hook));
      }
    }
  }

  // Takes off the hooks that are still ours.
  void uninstall() {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (hooks_[i] == nullptr) {
        continue;
      }
      auto& current = torch::autograd::impl::post_acc_grad_hooks(params_[i]);
      if (current.get() == hooks_[i]) {
        current.reset();
      }
      hooks_[i] = nullptr;
    }
  }

  // Storages a sample counts as parameters: never counted as gradients.
  void set_param_keys(const std::vector<std::pair<int64_t, int64_t>>& keys) {
    param_keys_.clear();
    for (const auto& k : keys) {
      param_keys_.insert(Key{k.first, k.second});
    }
  }

  // The gradients' storages now, each once and none of a parameter's, into `out` (cleared
  // first); returns their bytes.
  int64_t scan_grads(std::unordered_set<Key, KeyHash>* out) const {
    out->clear();
    int64_t total = 0;
    for (const auto& p : params_) {
      const at::Tensor& g = p.grad();
      if (!g.defined() || !g.has_storage()) {
        continue;
      }
      int64_t n = 0;
      const Key key = storage_key_of(g, &n);
      if (key.ptr == 0 || param_keys_.count(key) != 0 || !out->insert(key).second) {
        continue;
      }
      total += n;
    }
    return total;
  }

  // scan_grads for Python: (bytes, [(device, base pointer)]), as core.recorder.keys.storage_key
  // gives them.
  py::tuple grad_storages() const {
    std::unordered_set<Key, KeyHash> seen;
    const int64_t total = scan_grads(&seen);
    py::list keys;
    for (const auto& key : seen) {
      keys.append(py::make_tuple(key.device, key.ptr));
    }
    return py::make_tuple(total, keys);
  }

  const std::unordered_set<Key, KeyHash>& param_keys() const { return param_keys_; }

  // Drops the sums the hooks took: the next read reads every gradient. GradScaler's unscale
  // (torch._amp_foreach_non_finite_check_and_unscale_) changes gradients in place on CPU
  // without a new version, so a sum taken at backward would be the scaled gradients'.
  void forget() {
    for (auto& slot : slots_->slots) {
      slot = GradSlot{};
    }
  }

  // Sum of squares of every gradient now, or -1 where one is of a kind handled in Python.
  double sum_of_squares_now() {
    double total = 0.0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor& g = params_[i].grad();
      if (!g.defined()) {
        continue;
      }
      const GradSlot& slot = slots_->slots[i];
      if (slot.impl == g.unsafeGetTensorImpl() && slot.data == g.const_data_ptr() &&
          slot.version == g._version()) {
        total += slot.sumsq;
        continue;
      }
      double v = 0.0;
      if (!sum_of_squares(local_tensor_of(g), &v)) {  // a DTensor's: its local shard's
        return -1.0;
      }
      total += v;
    }
    return total;
  }

 private:
  std::vector<at::Tensor> params_;
  std::shared_ptr<GradSlots> slots_;
  std::vector<SumSquaresHook*> hooks_;  // ours, where installed (owned by the parameter)
  std::unordered_set<Key, KeyHash> param_keys_;
};

// --- a light-mode sample: core.recorder.probe.MemoryProbe.sample's CPU figures in one call ----------
//
// Between two phases, a light-mode CPU sample adds up the gradients' storages (after
// zero_grad and backward), the optimizer state's (after the optimizer) and the carried
// tensors' (every phase), each storage once and in one category only: what MemoryProbe does
// with Python sets of keys, here with C++ sets and no Python object per tensor. Run right
// after a phase's kernels have pushed the interpreter out of the caches, the Python version
// cost 5 times its warm time, 0.3 ms a step on gan. The same rules, the same figures
// (tests/core/test_native.py holds the two to it).

// Bytes in use by malloc (glibc's mallinfo2, as core.recorder.heap.process_heap_bytes reads it), or
// -1 where there is none.
int64_t heap_bytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
#else
  return -1;
#endif
}

// The process's resident memory: /proc/self/statm's resident pages times the page size (as
// core.recorder.heap.process_rss_bytes reads it), or -1 where there is no /proc.
int64_t rss_bytes() {
  const int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0) {
    return -1;
  }
  char buf[128];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) {
    return -1;
  }
  buf[n] = '\0';
  long long size = 0, resident = 0;
  if (std::sscanf(buf, "%lld %lld", &size, &resident) != 2) {
    return -1;
  }
  return static_cast<int64_t>(resident) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

class LightProbe {
 public:
  LightProbe(py::object watch, py::object saved)
      : watch_obj_(std::move(watch)), saved_obj_(std::move(saved)) {
    watch_ = watch_obj_.cast<GradWatch*>();
    saved_ = saved_obj_.cast<std::shared_ptr<SavedTracker>>();
  }

  // (grads, optimizer, activations, other, heap, rss, gathered) bytes now. `scan_grads`: the
  // gradients may have changed (else last scan's); `states`: the optimizers' `state` dicts
  // where the optimizer state may have changed, else None; `heap`: read the process heap and
  // resident memory (else, and where there is no mallinfo2 or /proc, -1).
  std::array<int64_t, 7> sample(bool scan_grads, const py::object& states,
                                const py::list& carried, bool heap) {
    if (scan_grads) {
      grads_total_ = watch_->scan_grads(&grads_) + scan_gathered_grads(watch_->param_keys());
    }
    if (!states.is_none()) {
      scan_optimizer(states.cast<py::list>());
    }
    const int64_t saved_bytes = saved_->live_bytes();  // first: it weighs the partial ones
    const auto& params = watch_->param_keys();
    const int64_t gathered = scan_gathered(params);
    auto& seen = seen_;  // a member: cleared, its buckets kept from one sample to the next
    seen.clear();
    int64_t other = 0;
    for (const auto& item : carried) {
      const at::Tensor* tp = tensor_of(item.ptr());
      if (tp == nullptr) {
        continue;
      }
      const at::Tensor& t = *tp;
      if (!t.defined() || !t.has_storage()) {
        continue;
      }
      int64_t n = 0;
      const Key key = storage_key_of(t, &n);
      if (params.count(key) || grads_.count(key) || opt_.count(key) || gathered_.count(key) ||
          !seen.insert(key).second) {
        continue;
      }
      if (saved_->contains(key.device, key.ptr)) {
        // Saved tensors reach only part of it (batches sliced from a data set): that
        // part is activations, the rest the loop's own.
        const int64_t part = saved_->counted_part(key.device, key.ptr);
        if (part < 0) {
          continue;
        }
        n -= part;
      }
      other += n;
    }
    return {grads_total_, opt_total_, saved_bytes, other,
            heap ? heap_bytes() : int64_t{-1}, heap ? rss_bytes() : int64_t{-1}, gathered};
  }

  // The tensors whose storages hold the parameters a sharded model gathers (FSDP's
  // unsharded parameters: core.recorder.sharded), as a list of weak references that
  // Python keeps up to date (the same list object, read at every sample).
  void set_gathered(py::list refs) { gathered_refs_ = std::move(refs); }

  // Objects holding a gradient in an attribute of theirs (FSDP1's flat parameters: the
  // reduce-scattered shard waits in `_saved_grad_shard` until backward's end makes it the
  // .grad), as weak references: each one's `attr` counted as a gradient where it is a tensor.
  void set_grad_holders(py::list refs, const std::string& attr) {
    grad_holders_ = std::move(refs);
    grad_attr_ = py::reinterpret_steal<py::object>(PyUnicode_InternFromString(attr.c_str()));
  }

  // Precise mode on the allocator recorder (core.native.tracker.NativeStorageTracker): each
  // edge also files the storages its sample found under their categories there and keeps
  // the recorder's live bytes in its row (a sample's temporaries are those no category
  // holds: records.edge_samples), and activations count whole a storage saved tensors
  // reach only part of where the run made it and the loop does not carry it. The rules of
  // MemoryProbe.sample's precise branch (found, classify, _kept_whole), in one C call.
  void set_precise(py::object recorder, int activations, int grads, int optimizer) {
    precise_obj_ = std::move(recorder);
    precise_ = precise_obj_.cast<std::shared_ptr<Recorder>>();
    cat_activations_ = activations;
    cat_grads_ = grads;
    cat_optimizer_ = optimizer;
  }

  // --- phase edges: a sample recorded where it is taken, handed to Python at step end ----
  //
  // A phase edge's sample as a MemorySample (a dataclass made in Python, handed to the sink,
  // its flags looked up in Python sets) cost 30-60 us right after the phase's kernels (gan,
  // after backward), where this call costs a few. The edge keeps its figures in a row; the
  // loop takes the rows once a step (or at an error or a stop) and makes them samples there.

  // Which phases (core.records.PHASE_CODE) rescan gradients, optimizer state and the process
  // heap: MemoryProbe's rules. `preset`: its `optimizers`' `state` dicts are read where the
  // optimizer state may have changed. `t0`: the run's start on clock().
  void set_rules(const std::vector<int>& grads, const std::vector<int>& opt,
                 const std::vector<int>& heap, py::object preset, double t0) {
    rules_.fill(0);
    for (int c : grads) {
      rule(c) |= kScanGrads;
    }
    for (int c : opt) {
      rule(c) |= kScanOptimizer;
    }
    for (int c : heap) {
      rule(c) |= kReadHeap;
    }
    preset_ = std::move(preset);
    t0_ = t0;
  }

  // Seconds on the steady clock that now_us() reads too (the loop calibrates t0 against
  // time.perf_counter, so the two clocks' origins need not agree).
  static double clock() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // `heap`: -1 reads the process heap where the phase's rule says, 0 never, 1 always (a
  // watch reads it once a step, after the step's first forward, however many it makes).
  // `rescan`: kScanGrads | kScanOptimizer read whatever the phase's rule (a step without
  // detail: earlier phases that change them took no sample; core.recorder.probe's RESCAN_*).
  void edge(int code, const py::list& carried, int heap = -1, int rescan = 0) {
    const double t = clock() - t0_;
    int r = rule(code) | (rescan & (kScanGrads | kScanOptimizer));
    if (heap >= 0) {
      r = heap ? (r | kReadHeap) : (r & ~kReadHeap);
    }
    py::object states = py::none();
    if ((r & kScanOptimizer) && preset_) {
      py::list list;
      for (py::handle o : preset_.attr("optimizers")) {
        list.append(o.attr("state"));
      }
      states = std::move(list);
    }
    auto v = sample((r & kScanGrads) != 0, states, carried, (r & kReadHeap) != 0);
    int64_t tracked = -1;
    if (precise_) {
      v[2] += kept_whole(carried);
      precise_->classify(saved_->keys(), cat_activations_);  // (a vector: counted whole)
      if (r & kScanGrads) {
        precise_->classify(grads_, cat_grads_);
      }
      if (r & kScanOptimizer) {
        precise_->classify(opt_, cat_optimizer_);
      }
      tracked = precise_->live_bytes();
    }
    rows_.push_back(EdgeRow{code, t, v, tracked});
  }

  // The rows since the last take, as (code, time_s, grads, optimizer, activations, other,
  // heap, rss, gathered, tracked) tuples, `tracked` the precise recorder's live bytes or -1;
  // the buffer is emptied.
  PyObject* take() {
    PyObject* out = PyList_New(static_cast<Py_ssize_t>(rows_.size()));
    if (out == nullptr) {
      return nullptr;
    }
    for (size_t i = 0; i < rows_.size(); ++i) {
      const EdgeRow& row = rows_[i];
      PyObject* item = Py_BuildValue(
          "(idLLLLLLLL)", row.code, row.t, static_cast<long long>(row.v[0]),
          static_cast<long long>(row.v[1]), static_cast<long long>(row.v[2]),
          static_cast<long long>(row.v[3]), static_cast<long long>(row.v[4]),
          static_cast<long long>(row.v[5]), static_cast<long long>(row.v[6]),
          static_cast<long long>(row.tracked));
      if (item == nullptr) {
        Py_DECREF(out);
        return nullptr;
      }
      PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), item);
    }
    rows_.clear();
    return out;
  }

 private:
  static constexpr int kScanGrads = 1, kScanOptimizer = 2, kReadHeap = 4;
  struct EdgeRow {
    int code;
    double t;
    std::array<int64_t, 7> v;
    int64_t tracked;
  };

  // Precise mode: the rest of each storage saved tensors reach only part of, where the
  // recorder saw the run make it and the loop does not carry it (autograd alone keeps all
  // of it; a data set's rest stays the loop's). After sample(): its live_bytes() refreshed
  // the parts.
  int64_t kept_whole(const py::list& carried) {
    const auto parts = saved_->partial_storages();
    if (parts.empty()) {
      return 0;
    }
    std::unordered_set<Key, KeyHash> held;
    for (const auto& item : carried) {
      const at::Tensor* tp = tensor_of(item.ptr());
      if (tp != nullptr && tp->defined() && tp->has_storage()) {
        int64_t n = 0;
        held.insert(storage_key_of(*tp, &n));
      }
    }
    int64_t whole = 0;
    for (const auto& [device, ptr, counted, nbytes] : parts) {
      if (!held.count(Key{device, ptr}) && precise_->contains(device, ptr)) {
        whole += nbytes - counted;
      }
    }
    return whole;
  }

  // The tensor of a list item: a tensor, or a live weak reference to one; else nullptr.
  static const at::Tensor* tensor_of(PyObject* obj) {
    if (PyWeakref_CheckRef(obj)) {  // a watch keeps weak references to the tensors it reads
      obj = PyWeakref_GetObject(obj);  // borrowed; Py_None once the tensor is gone
    }
    if (!THPVariable_Check(obj)) {
      return nullptr;
    }
    return &THPVariable_Unpack(obj);
  }

  // The gradients of the gathered parameters (FSDP's full gradients in a backward, before
  // it reduce-scatters them into the shards' .grad), added to grads_; their bytes.
  int64_t scan_gathered_grads(const std::unordered_set<Key, KeyHash>& params) {
    int64_t total = 0;
    for (const auto& item : gathered_refs_) {
      const at::Tensor* tp = tensor_of(item.ptr());
      if (tp == nullptr || !tp->defined()) {
        continue;
      }
      const at::Tensor& g = tp->grad();
      if (!g.defined() || !g.has_storage()) {
        continue;
      }
      int64_t n = 0;
      const Key key = storage_key_of(g, &n);
      if (key.ptr == 0 || params.count(key) || !grads_.insert(key).second) {
        continue;
      }
      total += n;
    }
    for (const auto& item : grad_holders_) {
      PyObject* obj = item.ptr();
      if (PyWeakref_CheckRef(obj)) {
        obj = PyWeakref_GetObject(obj);  // borrowed; Py_None once it is gone
      }
      if (obj == Py_None || !grad_attr_) {
        continue;
      }
      PyObject* held = PyObject_GetAttr(obj, grad_attr_.ptr());  // new reference or null
      if (held == nullptr) {
        PyErr_Clear();  // not there (before backward, after its end): nothing waits
        continue;
      }
      if (THPVariable_Check(held)) {
        const at::Tensor& g = THPVariable_Unpack(held);
        int64_t n = 0;
        const Key key = g.defined() && g.has_storage() ? storage_key_of(g, &n) : Key{};
        if (key.ptr != 0 && !params.count(key) && grads_.insert(key).second) {
          total += n;
        }
      }
      Py_DECREF(held);
    }
    return total;
  }

  // The gathered storages now, each once, none a parameter's and none freed (FSDP resizes
  // them to nothing between uses: 0 bytes, left out), into gathered_; their bytes.
  int64_t scan_gathered(const std::unordered_set<Key, KeyHash>& params) {
    gathered_.clear();
    int64_t total = 0;
    for (const auto& item : gathered_refs_) {
      const at::Tensor* tp = tensor_of(item.ptr());
      if (tp == nullptr || !tp->defined() || !tp->has_storage()) {
        continue;
      }
      int64_t n = 0;
      const Key key = storage_key_of(*tp, &n);
      if (key.ptr == 0 || params.count(key) || !gathered_.insert(key).second) {
        continue;
      }
      total += n;
    }
    return total;
  }

  int& rule(int code) {
    if (code < 0 || code >= static_cast<int>(rules_.size())) {
      throw py::value_error("phase code out of range: " + std::to_string(code));
    }
    return rules_[static_cast<size_t>(code)];
  }

  std::array<int, 8> rules_{};
  py::object preset_;
  double t0_ = 0.0;
  std::vector<EdgeRow> rows_;

  // Optimizers update their state in place: the same tensor objects, so the last scan stands
  // while the state holds the same ones (the rule core.recorder.probe keeps by id()) and none
  // of it is a gradient's storage now.
  void scan_optimizer(const py::list& states) {
    // The check reads only the state dicts and the Python tensor objects (the TensorImpl
    // pointer lives in the object): right after the optimizer's kernels, reading every
    // state tensor's storage too cost more than the rest of the sample.
    ids_now_.clear();
    for_each_state_tensor(states, [this](PyObject* value) {
      ids_now_.emplace_back(value, THPVariable_Unpack(value).unsafeGetTensorImpl());
    });
    if (opt_reusable_ && ids_now_ == opt_ids_ && disjoint(opt_, grads_)) {
      return;
    }
    std::vector<at::Tensor> tensors;
    tensors.reserve(ids_now_.size());
    for_each_state_tensor(states, [&tensors](PyObject* value) {
      tensors.push_back(THPVariable_Unpack(value));
    });
    const auto& params = watch_->param_keys();
    collect_optimizer(tensors, params, nullptr);
    opt_reusable_ = true;
    if (!disjoint(opt_, grads_)) {
      collect_optimizer(tensors, params, &grads_);
      opt_reusable_ = false;  // never reuse a scan that had to leave gradients out
    }
    std::swap(opt_ids_, ids_now_);
  }

  // Calls f(tensor object) for each tensor in the optimizers' state dicts (and in lists or
  // tuples there), in order.
  template <typename F>
  static void for_each_state_tensor(const py::list& states, F&& f) {
    for (const auto& state : states) {
      if (!PyDict_Check(state.ptr())) {
        continue;
      }
      PyObject *param, *per_param;
      Py_ssize_t i = 0;
      while (PyDict_Next(state.ptr(), &i, &param, &per_param)) {
        if (!PyDict_Check(per_param)) {
          continue;
        }
        PyObject *name, *value;
        Py_ssize_t j = 0;
        while (PyDict_Next(per_param, &j, &name, &value)) {
          if (THPVariable_Check(value)) {
            f(value);
          } else if (PyList_Check(value) || PyTuple_Check(value)) {
            // LBFGS keeps its history as lists of tensors (old_dirs, old_stps, ro, al)
            const Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
            for (Py_ssize_t k = 0; k < n; ++k) {
              PyObject* item = PySequence_Fast_GET_ITEM(value, k);
              if (THPVariable_Check(item)) {
                f(item);
              }
            }
          }
        }
      }
    }
  }

  void collect_optimizer(const std::vector<at::Tensor>& tensors,
                         const std::unordered_set<Key, KeyHash>& params,
                         const std::unordered_set<Key, KeyHash>* grads) {
    opt_.clear();
    opt_total_ = 0;
    for (const auto& t : tensors) {
      if (!t.defined() || !t.has_storage()) {
        continue;
      }
      int64_t n = 0;
      const Key key = storage_key_of(t, &n);
      if (params.count(key) || (grads != nullptr && grads->count(key)) ||
          !opt_.insert(key).second) {
        continue;
      }
      opt_total_ += n;
    }
  }

  static bool disjoint(const std::unordered_set<Key, KeyHash>& a,
                       const std::unordered_set<Key, KeyHash>& b) {
    const auto& small = a.size() <= b.size() ? a : b;
    const auto& large = a.size() <= b.size() ? b : a;
    for (const auto& k : small) {
      if (large.count(k)) {
        return false;
      }
    }
    return true;
  }

  py::object watch_obj_, saved_obj_, precise_obj_;  // keep them alive
  std::shared_ptr<Recorder> precise_;  // set_precise's, else null
  int cat_activations_ = 0, cat_grads_ = 0, cat_optimizer_ = 0;
  GradWatch* watch_;
  std::shared_ptr<SavedTracker> saved_;
  std::unordered_set<Key, KeyHash> grads_, opt_;
  int64_t grads_total_ = 0, opt_total_ = 0;
  std::unordered_set<Key, KeyHash> seen_;  // carried storages of this sample
  std::unordered_set<Key, KeyHash> gathered_;  // gathered storages of this sample
  py::list gathered_refs_;
  py::list grad_holders_;  // set_grad_holders
  py::object grad_attr_;
  // (tensor object, TensorImpl) of each state tensor at the last scan, and a buffer for now's
  std::vector<std::pair<const void*, const void*>> opt_ids_, ids_now_;
  bool opt_reusable_ = false;
};

// A set of pointers in one flat table (open addressing, linear probing): no allocation per
// element, as std::unordered_set makes, for the graph walk below.
class PointerSet {
 public:
  explicit PointerSet(size_t expected) {
    size_t cap = 64;
    while (cap < expected * 2) {
      cap *= 2;
    }
    slots_.assign(cap, nullptr);
  }

  // True if p was not there yet.
  bool insert(const void* p) {
    if ((size_ + 1) * 2 > slots_.size()) {
      grow();
    }
    return place(slots_, p);
  }

  size_t size() const { return size_; }

 private:
  bool place(std::vector<const void*>& slots, const void* p) {
    const size_t mask = slots.size() - 1;
    size_t i = (reinterpret_cast<uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ull >> 20 & mask;
    while (slots[i] != nullptr) {
      if (slots[i] == p) {
        return false;
      }
      i = (i + 1) & mask;
    }
    slots[i] = p;
    if (&slots == &slots_) {
      ++size_;
    }
    return true;
  }

  void grow() {
    std::vector<const void*> bigger(slots_.size() * 2, nullptr);
    for (const void* p : slots_) {
      if (p != nullptr) {
        place(bigger, p);
      }
    }
    slots_.swap(bigger);
  }

  std::vector<const void*> slots_;
  size_t size_ = 0;
};
