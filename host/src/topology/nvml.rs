//! Asking NVML: [`nvl_mesh_from_nvml`], a [`LinkSource`] over NVML's
//! NVLink queries. Everything that touches `nvml-wrapper` is here.

use std::sync::OnceLock;

use nvml_wrapper::Nvml;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};

use super::{LinkSource, MAX_DEVICES, NvlMesh, PciAddress, RemoteEndpoint, nvl_mesh_from_links};

/// Asks NVML for the NVLink mesh between the GPUs at `devices` (one PCI
/// address per rank, at most [`MAX_DEVICES`]). NVML missing
/// (`libnvidia-ml.so.1` not loadable), a GPU it does not know or a failed
/// query give a warning and [`NvlMesh::zero`]; GPUs without NVLink give
/// the zero mesh silently.
pub fn nvl_mesh_from_nvml(devices: &[PciAddress]) -> NvlMesh {
    if devices.len() > MAX_DEVICES {
        tracing::warn!(
            "NVLink mesh unknown, assuming no NVLink: {} devices given, at most {MAX_DEVICES} supported",
            devices.len()
        );
        return NvlMesh::zero();
    }
    let nvml = match shared_nvml() {
        Ok(nvml) => nvml,
        Err(e) => {
            tracing::warn!("NVLink mesh unknown, assuming no NVLink: NVML unavailable: {e}");
            return NvlMesh::zero();
        }
    };
    match NvmlLinks::new(nvml, devices) {
        Ok(source) => nvl_mesh_from_links(&source, devices),
        Err(e) => {
            tracing::warn!("NVLink mesh unknown, assuming no NVLink: {e}");
            NvlMesh::zero()
        }
    }
}

/// The process's NVML, initialised at the first rendezvous and kept: an
/// `nvmlInit`/`nvmlShutdown` pair per communicator (what `Nvml::init` and
/// its drop do) leaves one open descriptor behind in libnvidia-ml each
/// time NVML is torn down for real (a bare intra-node communicator
/// re-created in a loop gains one fd a cycle; whole communicators do not,
/// because NCCL keeps NVML initialised). NCCL does the same. A failed
/// init is not kept, so a later rendezvous tries again.
fn shared_nvml() -> Result<&'static Nvml, NvmlError> {
    static NVML: OnceLock<Nvml> = OnceLock::new();
    if let Some(nvml) = NVML.get() {
        return Ok(nvml);
    }
    let nvml = Nvml::init()?;
    // Two threads may both get here: the loser's handle is dropped (its
    // nvmlShutdown only lowers NVML's count, the winner's keeps it up).
    Ok(NVML.get_or_init(|| nvml))
}

/// `nvmlIntNvLinkDeviceType_t` values from `nvml.h`.
const NVML_NVLINK_DEVICE_TYPE_GPU: u32 = 0;
const NVML_NVLINK_DEVICE_TYPE_IBMNPU: u32 = 1;
const NVML_NVLINK_DEVICE_TYPE_SWITCH: u32 = 2;
const NVML_NVLINK_DEVICE_TYPE_UNKNOWN: u32 = 255;

/// [`LinkSource`] over NVML, for the GPUs of one rendezvous.
struct NvmlLinks<'nvml> {
    /// NVML handle of each rank's GPU.
    devices: Vec<nvml_wrapper::Device<'nvml>>,
    /// Every GPU NVML sees, so that a remote NVML will not classify can
    /// still be told apart from a switch. Empty if the listing failed.
    system_gpus: Vec<PciAddress>,
}

impl<'nvml> NvmlLinks<'nvml> {
    fn new(nvml: &'nvml Nvml, devices: &[PciAddress]) -> Result<Self, String> {
        let devices = devices
            .iter()
            .enumerate()
            .map(|(rank, address)| {
                nvml.device_by_pci_bus_id(address.to_string())
                    .map_err(|e| format!("NVML does not know gpu {address} of rank {rank}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let system_gpus = list_system_gpus(nvml).unwrap_or_else(|e| {
            tracing::debug!("NVML could not list the GPUs: {e}");
            Vec::new()
        });
        Ok(Self {
            devices,
            system_gpus,
        })
    }
}

fn list_system_gpus(nvml: &Nvml) -> Result<Vec<PciAddress>, NvmlError> {
    (0..nvml.device_count()?)
        .map(|index| Ok(pci_address(&nvml.device_by_index(index)?.pci_info()?)))
        .collect()
}

fn pci_address(info: &nvml_wrapper::struct_wrappers::device::PciInfo) -> PciAddress {
    PciAddress {
        domain: info.domain,
        bus: info.bus,
        device: info.device,
    }
}

impl LinkSource for NvmlLinks<'_> {
    type Error = NvmlError;

    fn remote_endpoint(&self, rank: usize, link: u32) -> Result<Option<RemoteEndpoint>, NvmlError> {
        let Some(device) = self.devices.get(rank) else {
            return Ok(None);
        };
        let nvlink = device.link_wrapper_for(link);
        match nvlink.is_active() {
            Ok(true) => {}
            // No NVLink on this GPU, or no link with this index on it.
            Ok(false) | Err(NvmlError::NotSupported | NvmlError::InvalidArg) => return Ok(None),
            Err(e) => return Err(e),
        }
        let remote_type =
            remote_device_type(device, link).unwrap_or(NVML_NVLINK_DEVICE_TYPE_UNKNOWN);
        Ok(Some(match remote_type {
            NVML_NVLINK_DEVICE_TYPE_SWITCH => RemoteEndpoint::Switch,
            NVML_NVLINK_DEVICE_TYPE_GPU => {
                RemoteEndpoint::Gpu(pci_address(&nvlink.remote_pci_info()?))
            }
            NVML_NVLINK_DEVICE_TYPE_IBMNPU => RemoteEndpoint::Other,
            _ => {
                let remote = pci_address(&nvlink.remote_pci_info()?);
                if self.system_gpus.contains(&remote) {
                    RemoteEndpoint::Gpu(remote)
                } else {
                    RemoteEndpoint::Unclassified(remote)
                }
            }
        }))
    }
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType`, called directly: nvml-wrapper
/// 0.13's `NvLink::remote_device_type` lets NVML write into a temporary
/// and always returns `Unknown`, so it cannot tell a switch from a GPU.
fn remote_device_type(device: &nvml_wrapper::Device<'_>, link: u32) -> Result<u32, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetNvLinkRemoteDeviceType
            .as_ref(),
    )?;
    let mut remote_type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    // SAFETY: `sym` was resolved from the loaded libnvidia-ml with the
    // signature nvml.h declares. The handle is live: `device` borrows the
    // `Nvml` that keeps NVML initialised for this whole call. The out
    // pointer is a valid, aligned `u32` (`nvmlIntNvLinkDeviceType_t` is
    // `unsigned int`) that NVML only writes.
    let ret = unsafe { sym(device.handle(), link, &mut remote_type) };
    nvml_try(ret)?;
    Ok(remote_type)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::detect_topology;
    use crate::topology::links::NVLINK_MAX_LINKS;

    #[test]
    fn nvml_with_unknown_gpus_gives_zero_mesh() {
        // No driver here: NVML fails to load. With a driver: NVML knows
        // no GPU at these addresses. Either way a warning, no panic.
        let devices = [
            PciAddress {
                domain: 0xfffe,
                bus: 0xff,
                device: 0x1f,
            },
            PciAddress {
                domain: 0xfffe,
                bus: 0xfe,
                device: 0x1f,
            },
        ];
        assert_eq!(nvl_mesh_from_nvml(&devices), NvlMesh::zero());
        assert_eq!(nvl_mesh_from_nvml(&[]), NvlMesh::zero());
    }

    /// Repeated rendezvous do not cycle NVML: the handle is the same, and
    /// asking for the mesh again opens no descriptor. Where
    /// NVML is missing (no driver) it skips, saying so.
    #[test]
    fn nvml_is_initialised_once() {
        let Ok(first) = shared_nvml() else {
            eprintln!("skipped: NVML unavailable (no NVIDIA driver)");
            return;
        };
        let second = shared_nvml().expect("NVML stays initialised");
        assert!(std::ptr::eq(first, second), "a second NVML handle");
        let gpus = list_system_gpus(first).expect("NVML lists the GPUs");
        let gpus = &gpus[..gpus.len().min(MAX_DEVICES)];
        let fds = || std::fs::read_dir("/proc/self/fd").map(|d| d.count());
        // The first call may open what NVML opens lazily.
        nvl_mesh_from_nvml(gpus);
        let before = fds().expect("count fds");
        for _ in 0..5 {
            nvl_mesh_from_nvml(gpus);
        }
        assert_eq!(fds().expect("count fds"), before, "fds grew over 5 meshes");
    }

    /// Prints the NVML mesh of every GPU on this machine; run on a GPU
    /// machine with `--ignored --nocapture`.
    #[test]
    #[ignore = "needs an NVIDIA driver; prints this machine's mesh"]
    fn nvml_mesh_of_this_machine() {
        let nvml = Nvml::init().expect("NVML loads on a GPU machine");
        let devices = list_system_gpus(&nvml).expect("NVML lists the GPUs");
        let devices = &devices[..devices.len().min(MAX_DEVICES)];
        let source = NvmlLinks::new(&nvml, devices).expect("NVML knows its own GPUs");
        for link in 0..NVLINK_MAX_LINKS {
            println!("rank 0 link {link}: {:?}", source.remote_endpoint(0, link));
        }
        drop(source);
        drop(nvml);
        println!(
            "gpus: {:?}",
            devices.iter().map(ToString::to_string).collect::<Vec<_>>()
        );
        let mesh = nvl_mesh_from_nvml(devices);
        println!("{mesh}");
        println!("topology: {}", detect_topology(&mesh, devices.len()));
        assert!(
            !mesh.is_zero() || devices.len() < 2,
            "expected NVLink between the GPUs"
        );
    }
}
