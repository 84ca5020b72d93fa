// The Python module of attnlab's kernels (attnlab/model/kernels.py loads it).
#include "kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("cached_attention", &attnlab::cached_attention, "Eq. (1), one query per row, over a slot-indexed key/value store");
  m.def("top_k", &attnlab::top_k, "each row's k largest values and their columns, in one pass");
  m.def("log_softmax_top_k", &attnlab::log_softmax_top_k,
        "each row's k most likely columns under log_softmax, their log-probabilities, and one column's");
  m.def("few_rows_linear", &attnlab::few_rows_linear, "x · Wᵀ + b for a few rows, W as column tiles");
  m.def("dropout_keep", &attnlab::dropout_keep, "dropout's keep mask (0 or 1 in x's dtype) from a seed");
  m.def("smoothed_loss", &attnlab::smoothed_loss,
        "each row's label-smoothed loss and NLL, and the loss's gradient, in one pass over the logits");
  m.def("scale_", &attnlab::scale_, "x times a factor, in place");
  m.def("grad_norm", &attnlab::grad_norm, "the L2 norm of all the tensors' values together");
}
