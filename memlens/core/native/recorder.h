// Part of memlens_native.cpp, included inside its anonymous namespace (one translation
// unit, built as one module): precise mode's Recorder: every allocation and free of the CPU allocator, with its Python stack.
// Not a standalone header: it relies on the includes and the helpers before it.

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The CPU allocator reports a free only of what it saw allocated while someone listened,
// and logs a warning about each other free it is asked to report ("Memory block of unknown
// size was allocated before the profiling started"): a storage made before the run and
// freed during it. That is expected here (such storages are followed from Python), so
// c10's log threshold is raised to errors while any recorder listens.
std::mutex log_mu;
int listening = 0;
int saved_log_level = 0;

void quiet_logs(bool on) {
  std::lock_guard<std::mutex> lock(log_mu);
  if (on) {
    if (listening++ == 0) {
      saved_log_level = FLAGS_caffe2_log_level;
      FLAGS_caffe2_log_level = std::max(saved_log_level, 2);  // 2: ERROR
    }
  } else if (listening > 0 && --listening == 0) {
    FLAGS_caffe2_log_level = saved_log_level;
  }
}

struct Key {
  int64_t device;
  int64_t ptr;
  bool operator==(const Key& o) const { return device == o.device && ptr == o.ptr; }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<int64_t>()(k.ptr) ^ (static_cast<size_t>(k.device) << 56);
  }
};

// A wrapper subclass (DTensor: FSDP2's sharded parameters, their gradients and optimizer
// state) holds no bytes in its own storage, a placeholder without data; the tensor inside
// it does (a DTensor's local shard). core/recorder/keys.py's inner_tensor, the same rule:
// `_local_tensor`, else the first tensor __tensor_flatten__ names, looked into 4 deep at
// most; an undefined tensor where there is none. Needs the GIL (every caller holds it: the
// pack hook, and the samples Python calls); a Python error is cleared, never raised.
bool has_placeholder_storage(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) {
    return false;
  }
  const auto& st = t.storage();
  return st.data() == nullptr && st.nbytes() != 0 && t.key_set().has(c10::DispatchKey::Python);
}

at::Tensor inner_tensor_of(const at::Tensor& wrapper) {
  at::Tensor t = wrapper;
  for (int depth = 0; depth < 4 && has_placeholder_storage(t); ++depth) {
    PyObject* obj = THPVariable_Wrap(t);  // a new reference to its Python object
    if (obj == nullptr) {
      PyErr_Clear();
      return at::Tensor();
    }
    at::Tensor inner;
    PyObject* local = PyObject_GetAttrString(obj, "_local_tensor");
    if (local != nullptr && THPVariable_Check(local)) {
      inner = THPVariable_Unpack(local);
    } else {
      PyErr_Clear();
      PyObject* flat = PyObject_CallMethod(obj, "__tensor_flatten__", nullptr);
      PyObject* names = flat != nullptr && PyTuple_Check(flat) && PyTuple_GET_SIZE(flat) > 0
                            ? PySequence_Fast(PyTuple_GET_ITEM(flat, 0), "names")
                            : nullptr;
      for (Py_ssize_t i = 0; names != nullptr && i < PySequence_Fast_GET_SIZE(names); ++i) {
        PyObject* value = PyObject_GetAttr(obj, PySequence_Fast_GET_ITEM(names, i));
        if (value != nullptr && THPVariable_Check(value)) {
          inner = THPVariable_Unpack(value);
          Py_DECREF(value);
          break;
        }
        Py_XDECREF(value);
        PyErr_Clear();
      }
      Py_XDECREF(names);
      Py_XDECREF(flat);
      PyErr_Clear();
    }
    Py_XDECREF(local);
    Py_DECREF(obj);
    if (!inner.defined()) {
      return at::Tensor();
    }
    t = inner;
  }
  return has_placeholder_storage(t) ? at::Tensor() : t;
}

// The tensor whose storage holds `t`'s bytes: itself, or a wrapper's inner tensor.
at::Tensor local_tensor_of(const at::Tensor& t) {
  return has_placeholder_storage(t) ? inner_tensor_of(t) : t;
}

// A tensor's storage as core.recorder.keys.storage_key gives it: (device index, -1 for CPU;
// base pointer), and its bytes in `nbytes`. A wrapper subclass: its inner tensor's. A
// storage without data (freed, resized to 0 by FSDP, or a wrapper with nothing inside):
// pointer 0 and 0 bytes.
Key storage_key_of(const at::Tensor& t, int64_t* nbytes) {
  if (has_placeholder_storage(t)) {
    const at::Tensor inner = inner_tensor_of(t);
    if (inner.defined()) {
      return storage_key_of(inner, nbytes);
    }
    *nbytes = 0;
    return Key{t.device().is_cpu() ? -1 : t.device().index(), 0};
  }
  const int64_t device = t.device().is_cpu() ? -1 : t.device().index();
  if (!t.has_storage()) {
    *nbytes = 0;
    return Key{device, 0};
  }
  const auto& st = t.storage();
  const auto ptr = reinterpret_cast<int64_t>(st.data());
  *nbytes = ptr != 0 ? static_cast<int64_t>(st.nbytes()) : 0;
  return Key{device, ptr};
}

struct Record {
  Key key;
  int64_t nbytes;
  int category;
  int pending_events;  // events that name it and are not drained yet
  bool live;
};

struct Event {
  int64_t t_us;
  int action;  // 0 alloc, 1 free
  int64_t id;
  int64_t step;
  int phase;
  int64_t stack;  // index into the recorder's stacks, -1 for none
};

constexpr int kStackFrames = 6;

struct Frame {
  PyObject* code;  // a reference the recorder holds
  int lasti;
  bool operator==(const Frame& o) const { return code == o.code && lasti == o.lasti; }
};

struct StackHash {
  size_t operator()(const std::vector<Frame>& v) const {
    size_t h = v.size();
    for (const auto& f : v) {
      h = h * 1000003u ^ (reinterpret_cast<size_t>(f.code) >> 4) ^ (static_cast<size_t>(f.lasti) << 40);
    }
    return h;
  }
};

class Recorder : public c10::MemoryReportingInfoBase {
 public:
  // internal: substrings (or, ending in '*', prefixes) of the file names whose frames are
  // left out of stacks. with_frames false: no stacks at all.
  Recorder(int64_t t0_us, bool with_frames, std::vector<std::string> internal)
      : t0_us_(t0_us), with_frames_(with_frames), internal_(std::move(internal)) {
    // A step makes a few hundred events: no rehash or regrowth once the first steps have
    // sized them (each allocation of the user's is one of these, inside c10's allocator)
    live_.reserve(4096);
    records_.reserve(4096);
    events_.reserve(1024);
    frames_.reserve(kStackFrames);
  }

  ~Recorder() override {
    // The code objects stacks refer to are released by clear() (the Python wrapper calls
    // it, GIL held, when it goes); any left are leaked rather than released from a thread
    // that may not hold the GIL.
  }

  bool memoryProfilingEnabled() const override { return enabled_; }

  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t /*total_allocated*/,
                         size_t /*total_reserved*/, c10::Device device) override {
    if (!enabled_ || alloc_size == 0 || ptr == nullptr) {
      return;
    }
    const int64_t t = now_us() - t0_us_;
    const Key key{device.index(), reinterpret_cast<int64_t>(ptr)};
    int64_t stack = -1;
    if (alloc_size > 0 && with_frames_ && std::this_thread::get_id() == owner_ &&
        Py_IsInitialized()) {
      PyGILState_STATE g = PyGILState_Ensure();
      stack = capture_stack();
      PyGILState_Release(g);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (alloc_size > 0) {
      alloc_locked(key, alloc_size, t, category_guess_, stack);
    } else {
      free_locked(key, t);
    }
  }

  // --- called from Python (GIL held) -----------------------------------------------------
  // Listens on this thread from now on (again, after a stop() from another thread).
  void start() {
    if (active_) {
      if (std::this_thread::get_id() == owner_ && !enabled_.exchange(true)) {
        quiet_logs(true);
      }
      return;
    }
    owner_ = std::this_thread::get_id();
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, self_.lock());
    active_ = true;
    enabled_ = true;
    quiet_logs(true);
  }

  // Takes the recorder off the thread that started it. Returns false where something else
  // was pushed on top and never popped (then it only stops reporting).
  bool stop() {
    if (enabled_.exchange(false)) {
      quiet_logs(false);
    }
    if (!active_ || std::this_thread::get_id() != owner_) {
      return !active_;
    }
    auto top = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
    if (top != this) {
      return false;
    }
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    active_ = false;
    return true;
  }

  // A storage that existed before the recorder started (parameters, carried state).
  int64_t track(int64_t device, int64_t ptr, int64_t nbytes, int category, bool at_start) {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{device, ptr};
    auto it = live_.find(key);
    if (it != live_.end()) {
      return it->second;
    }
    return alloc_locked(key, nbytes, at_start ? 0 : now_us() - t0_us_, category, -1);
  }

  // Whether a storage is live and was seen made (or registered) by this recorder.
  bool contains(int64_t device, int64_t ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.count(Key{device, ptr}) != 0;
  }

  void freed(int64_t device, int64_t ptr, int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(Key{device, ptr});
    if (it != live_.end() && it->second == id) {
      free_locked(Key{device, ptr}, now_us() - t0_us_);
    }
  }

  void begin_phase(int64_t step, int phase, int category) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = step;
    phase_ = phase;
    category_guess_ = category;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_bytes_ = live_bytes_;
  }

  int64_t live_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_bytes_;
  }

  int64_t peak_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_bytes_;
  }

  size_t pending() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
  }

  // Sets the category of the live storages among `keys` (device, ptr).
  void classify(const std::vector<std::pair<int64_t, int64_t>>& keys, int category) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& k : keys) {
      auto it = live_.find(Key{k.first, k.second});
      if (it != live_.end()) {
        records_[it->second].category = category;
      }
    }
  }

  // The same for a set of keys (precise mode's native edges: LightProbe.set_precise).
  void classify(const std::unordered_set<Key, KeyHash>& keys, int category) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& k : keys) {
      auto it = live_.find(k);
      if (it != live_.end()) {
        records_[it->second].category = category;
      }
    }
  }

  // Pending events as a float64 array of rows (t_us, action, id, ptr, nbytes, category,
  // step, phase, stack id or -1), the category as of now for storages still live, as of
  // their free otherwise; and the text of each stack first seen since the last drain, as
  // (id, "file:line:function|...", newest first).
  std::pair<py::array_t<double>, py::list> drain() {
    std::vector<Event> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events.swap(events_);
      events_.swap(spare_);  // the buffer of the drain before, emptied, its capacity kept
    }
    const auto n = static_cast<py::ssize_t>(events.size());
    py::array_t<double> rows({n, static_cast<py::ssize_t>(9)});
    auto out = rows.mutable_unchecked<2>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      py::ssize_t i = 0;
      for (const auto& e : events) {
        auto it = records_.find(e.id);
        Record& r = it->second;
        out(i, 0) = static_cast<double>(e.t_us);
        out(i, 1) = e.action;
        out(i, 2) = static_cast<double>(e.id);
        out(i, 3) = static_cast<double>(r.key.ptr);
        out(i, 4) = static_cast<double>(r.nbytes);
        out(i, 5) = r.category;
        out(i, 6) = static_cast<double>(e.step);
        out(i, 7) = e.phase;
        out(i, 8) = static_cast<double>(e.stack);
        ++i;
        if (--r.pending_events == 0 && !r.live) {
          records_.erase(it);
        }
      }
      events.clear();
      spare_.swap(events);  // the next drain's buffer for events_
    }
    py::list texts;
    for (; texts_done_ < stacks_.size(); ++texts_done_) {
      texts.append(py::make_tuple(texts_done_, stack_text(stacks_[texts_done_])));
    }
    return {rows, texts};
  }

  // Drops every event and record, and the stacks' references (GIL held).
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    events_.clear();
    live_.clear();
    records_.clear();
    live_bytes_ = peak_bytes_ = 0;
    for (auto& kv : internal_code_) {
      Py_DECREF(kv.first);
    }
    internal_code_.clear();
    stack_ids_.clear();
    stacks_.clear();
    texts_done_ = 0;
  }

  std::weak_ptr<Recorder> self_;

 private:
  int64_t alloc_locked(const Key& key, int64_t nbytes, int64_t t, int category,
                       int64_t stack) {
    auto it = live_.find(key);
    if (it != live_.end()) {
      // Its free happened where this recorder could not see it: it is gone now.
      free_locked(key, t);
    }
    const int64_t id = next_id_++;
    records_[id] = Record{key, nbytes, category, 1, true};
    live_[key] = id;
    live_bytes_ += nbytes;
    if (live_bytes_ > peak_bytes_) {
      peak_bytes_ = live_bytes_;
    }
    events_.push_back(Event{t, 0, id, step_, phase_, stack});
    return id;
  }

  void free_locked(const Key& key, int64_t t) {
    auto it = live_.find(key);
    if (it == live_.end()) {
      return;  // never seen: allocated before the recorder started and not tracked
    }
    const int64_t id = it->second;
    live_.erase(it);
    Record& r = records_[id];
    r.live = false;
    r.pending_events += 1;
    live_bytes_ -= r.nbytes;
    events_.push_back(Event{t, 1, id, step_, phase_, -1});
  }

  // GIL held. Whether a code object's file is one whose frames stay out of stacks.
  bool internal(PyObject* code) {
    auto it = internal_code_.find(code);
    if (it != internal_code_.end()) {
      return it->second;
    }
    bool inside = false;
    PyObject* name = PyObject_GetAttrString(code, "co_filename");
    const char* text = name != nullptr ? PyUnicode_AsUTF8(name) : nullptr;
    if (text != nullptr) {
      const std::string file(text);
      for (const auto& pat : internal_) {
        if (!pat.empty() && pat.back() == '*') {
          inside = file.compare(0, pat.size() - 1, pat, 0, pat.size() - 1) == 0;
        } else {
          inside = file.find(pat) != std::string::npos;
        }
        if (inside) {
          break;
        }
      }
    }
    Py_XDECREF(name);
    PyErr_Clear();
    Py_INCREF(code);  // the pointer stays a key: keep the object
    internal_code_.emplace(code, inside);
    return inside;
  }

  // GIL held, owner thread. The id of the current Python stack.
  int64_t capture_stack() {
    std::vector<Frame>& frames = frames_;  // looked up as it is, copied only when new
    frames.clear();
    PyFrameObject* f = PyThreadState_GetFrame(PyThreadState_Get());
    while (f != nullptr && static_cast<int>(frames.size()) < kStackFrames) {
      PyCodeObject* code = PyFrame_GetCode(f);
      if (!internal(reinterpret_cast<PyObject*>(code))) {
        frames.push_back(Frame{reinterpret_cast<PyObject*>(code), PyFrame_GetLasti(f)});
      }
      Py_DECREF(code);
      PyFrameObject* back = PyFrame_GetBack(f);
      Py_DECREF(f);
      f = back;
    }
    Py_XDECREF(f);
    auto it = stack_ids_.find(frames);
    if (it != stack_ids_.end()) {
      return it->second;
    }
    const auto id = static_cast<int64_t>(stacks_.size());
    stack_ids_.emplace(frames, id);  // code objects already held by internal_code_
    stacks_.push_back(frames);
    return id;
  }

  // GIL held. "file:line:function|..." for a stack, newest frame first.
  static std::string stack_text(const std::vector<Frame>& frames) {
    std::string out;
    for (const auto& f : frames) {
      auto* code = reinterpret_cast<PyCodeObject*>(f.code);
      PyObject* file = PyObject_GetAttrString(f.code, "co_filename");
      PyObject* name = PyObject_GetAttrString(f.code, "co_name");
      const char* file_s = file ? PyUnicode_AsUTF8(file) : nullptr;
      const char* name_s = name ? PyUnicode_AsUTF8(name) : nullptr;
      if (!out.empty()) {
        out += '|';
      }
      out += file_s ? file_s : "?";
      out += ':';
      out += std::to_string(f.lasti >= 0 ? PyCode_Addr2Line(code, f.lasti) : -1);
      out += ':';
      out += name_s ? name_s : "?";
      Py_XDECREF(file);
      Py_XDECREF(name);
      PyErr_Clear();
    }
    return out;
  }

  const int64_t t0_us_;
  const bool with_frames_;
  const std::vector<std::string> internal_;
  std::unordered_map<PyObject*, bool> internal_code_;  // GIL held
  std::unordered_map<std::vector<Frame>, int64_t, StackHash> stack_ids_;  // GIL held
  std::vector<std::vector<Frame>> stacks_;  // GIL held
  size_t texts_done_ = 0;
  std::thread::id owner_;
  bool active_ = false;
  std::atomic<bool> enabled_{false};
  std::mutex mu_;
  std::unordered_map<Key, int64_t, KeyHash> live_;
  std::unordered_map<int64_t, Record> records_;
  std::vector<Event> events_;
  std::vector<Event> spare_;  // drain's: events_'s next buffer
  std::vector<Frame> frames_;  // capture_stack's, GIL held
  int64_t live_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t next_id_ = 0;
  int64_t step_ = 0;
  int phase_ = 0;
  int category_guess_ = 0;
};

std::shared_ptr<Recorder> make_recorder(int64_t t0_us, bool with_frames,
                                        std::vector<std::string> internal) {
  auto r = std::make_shared<Recorder>(t0_us, with_frames, std::move(internal));
  r->self_ = r;
  return r;
}
