//! Unix-socket channel passing file descriptors between the ranks of one job (in progress).
