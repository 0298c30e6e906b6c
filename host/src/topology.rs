//! NVLink topology from NVML, and its classification (in progress).
