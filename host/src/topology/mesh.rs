//! The mesh: NVLink counts between the ranks' GPUs ([`NvlMesh`]) and the
//! identity of a GPU across processes ([`PciAddress`]).

use std::fmt;

/// Most GPUs one mesh describes (PyTorch's `kMaxDevices`).
pub const MAX_DEVICES: usize = 8;

/// NVLink counts between device pairs: `links(a, b)` is the number of
/// NVLinks over which device `a` reaches device `b` (directly or through
/// NVSwitches). Indices are ranks (positions in the list of devices the
/// mesh was built for), not CUDA ordinals. The diagonal is always zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NvlMesh(pub [[u32; MAX_DEVICES]; MAX_DEVICES]);

impl NvlMesh {
    /// The mesh with no links at all (PCIe only, or nothing known).
    pub const fn zero() -> Self {
        Self([[0; MAX_DEVICES]; MAX_DEVICES])
    }

    /// Number of links from `from` to `to`; zero for ranks outside the mesh.
    pub fn links(&self, from: usize, to: usize) -> u32 {
        self.0
            .get(from)
            .and_then(|row| row.get(to))
            .copied()
            .unwrap_or(0)
    }

    /// Whether `a` and `b` are distinct and linked in both directions.
    pub fn is_linked(&self, a: usize, b: usize) -> bool {
        a != b && self.links(a, b) > 0 && self.links(b, a) > 0
    }

    /// Whether the mesh holds no link at all.
    pub fn is_zero(&self) -> bool {
        self.0.iter().flatten().all(|&count| count == 0)
    }
}

impl fmt::Display for NvlMesh {
    /// One row per rank, link counts separated by spaces (PyTorch prints
    /// its `NvlMesh` the same way).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for row in &self.0 {
            let mut sep = "";
            for count in row {
                write!(f, "{sep}{count:>2}")?;
                sep = " ";
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// PCI address of a GPU: the identity ranks exchange at rendezvous, since
/// CUDA ordinals and NVML indices differ between processes
/// (`CUDA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER`). The function number is
/// not kept: GPUs are function 0, and NVML's link queries do not report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI domain (segment), up to 32 bits in NVML.
    pub domain: u32,
    /// Bus number, 0 to 0xff.
    pub bus: u32,
    /// Device number on the bus, 0 to 0x1f.
    pub device: u32,
}

impl PciAddress {
    /// Parses `domain:bus:device.function` in hex, as CUDA
    /// (`0000:18:00.0`) and NVML (`00000000:18:00.0`) write it, or
    /// `bus:device.function` (domain 0). `None` if it is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (location, function) = text.rsplit_once('.')?;
        let function = u32::from_str_radix(function, 16).ok()?;
        let mut fields = location.rsplitn(3, ':');
        let device = u32::from_str_radix(fields.next()?, 16).ok()?;
        let bus = u32::from_str_radix(fields.next()?, 16).ok()?;
        let domain = match fields.next() {
            Some(domain) => u32::from_str_radix(domain, 16).ok()?,
            None => 0,
        };
        (bus <= 0xff && device <= 0x1f && function <= 7).then_some(Self {
            domain,
            bus,
            device,
        })
    }
}

impl fmt::Display for PciAddress {
    /// NVML's form, `NVML_DEVICE_PCI_BUS_ID_FMT` (`%08X:%02X:%02X.0`),
    /// which `nvmlDeviceGetHandleByPciBusId_v2` accepts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08X}:{:02X}:{:02X}.0",
            self.domain, self.bus, self.device
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::test_meshes::dgx1v_mesh;

    #[test]
    fn mesh_display_has_one_row_per_rank() {
        let text = dgx1v_mesh().to_string();
        assert_eq!(text.lines().count(), MAX_DEVICES);
        assert_eq!(text.lines().next(), Some(" 0  1  1  2  2  0  0  0"));
    }

    #[test]
    fn pci_address_parse_and_display() {
        let cuda = PciAddress::parse("0000:18:00.0");
        let nvml = PciAddress::parse("00000000:18:00.0");
        let short = PciAddress::parse("18:00.0");
        let expected = PciAddress {
            domain: 0,
            bus: 0x18,
            device: 0,
        };
        assert_eq!(cuda, Some(expected));
        assert_eq!(nvml, Some(expected));
        assert_eq!(short, Some(expected));
        assert_eq!(expected.to_string(), "00000000:18:00.0");
        let odd = PciAddress::parse("0001:9a:1f.0");
        assert_eq!(
            odd.map(|a| a.to_string()).as_deref(),
            Some("00000001:9A:1F.0")
        );
        for bad in [
            "",
            "18:00",
            "0000:100:00.0",
            "0000:18:20.0",
            "0000:18:00.8",
            "zz:00.0",
        ] {
            assert_eq!(PciAddress::parse(bad), None, "{bad:?}");
        }
    }
}
