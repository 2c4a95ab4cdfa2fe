// sonde._sonde.Sae (sae_bind.h). encode/decode take C-contiguous float32 [rows, width] (the
// package's SAE reshapes [..., width] to that) and run core's sae_encode/sae_decode without the GIL.
#include "sae_bind.h"

#include "arrays.h"

#include <sonde/error.h>

#include <pybind11/numpy.h>

namespace sonde::py {
namespace pb = pybind11;
using namespace pybind11::literals;

namespace {

using Rows = pb::array_t<float, pb::array::c_style | pb::array::forcecast>;

std::int64_t rows_of(const Rows& x, std::int64_t width, const char* what) {
  if (x.ndim() != 2 || x.shape(1) != width)
    bad_input("sae.{}: rows of width {} expected, got an array of shape [{}]", what, width,
              x.ndim() == 2 ? std::to_string(x.shape(0)) + ", " + std::to_string(x.shape(1)) : std::to_string(x.ndim()) + " dims");
  return x.shape(0);
}

}  // namespace

void bind_sae(pb::module_& m) {
  pb::class_<PySae>(m, "Sae")
      .def(pb::init([](const std::string& path) {
             pb::gil_scoped_release nogil;
             return PySae{Sae::load(path)};
           }),
           "path"_a)
      .def("describe",
           [](const PySae& s) {
             const SaeConfig& c = s.sae->config();
             nlohmann::json j{{"folder", c.folder}, {"architecture", c.architecture}, {"hook_name", c.hook_name},
                              {"d_in", c.d_in}, {"d_sae", c.d_sae}, {"d_out", c.d_out}, {"weights_sha256", c.weights_sha256}};
             if (c.transcoder) j["hook_name_out"] = c.hook_name_out;
             if (c.arch == SaeArch::TopK) j["k"] = c.k;
             return j.dump();
           })
      .def_property_readonly("sparsity",
                             [](const PySae& s) -> pb::object {
                               const Tensor& t = s.sae->weights().sparsity;
                               if (t.empty()) return pb::none();
                               std::vector<float> v(t.data<float>(), t.data<float>() + t.shape().numel());
                               return owned_array(std::move(v), {static_cast<pb::ssize_t>(t.shape().numel())});
                             })
      .def("encode",
           [](const PySae& s, const Rows& x) {
             const std::int64_t n = rows_of(x, s.sae->config().d_in, "encode");
             std::vector<float> out;
             {
               pb::gil_scoped_release nogil;
               out = sae_encode(*s.sae, x.data(), n);
             }
             return owned_array(std::move(out), {static_cast<pb::ssize_t>(n), static_cast<pb::ssize_t>(s.sae->config().d_sae)});
           })
      .def("decode", [](const PySae& s, const Rows& f) {
        const std::int64_t n = rows_of(f, s.sae->config().d_sae, "decode");
        std::vector<float> out;
        {
          pb::gil_scoped_release nogil;
          out = sae_decode(*s.sae, f.data(), n);
        }
        return owned_array(std::move(out), {static_cast<pb::ssize_t>(n), static_cast<pb::ssize_t>(s.sae->config().d_out)});
      });
}

}  // namespace sonde::py
