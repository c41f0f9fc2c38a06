use std::time::Duration;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let img = std::path::PathBuf::from(&a[1]);
    let mut ev = |e: &wsp::Event| eprintln!("event: {e:?}");
    if a[2] == "resume" {
        let mut o = wsp::ResumeOptions::default();
        o.window = Some(powerfail::Window::deadline_ms(1000.0).unwrap());
        o.after_save = wsp::AfterSave::Kill;
        if a.len() > 3 {
            o.warn_after = Some(Duration::from_millis(a[3].parse().unwrap()));
        }
        eprintln!("{:?}", wsp::resume(&img, &o, &mut ev));
    } else {
        let _ = std::fs::remove_file(&img);
        let mut c = wsp::RunConfig::new(&img, &a[2], a[4..].iter().map(Into::into).collect());
        c.window = powerfail::Window::deadline_ms(1000.0).unwrap();
        c.after_save = wsp::AfterSave::Kill;
        let ms: u64 = a[3].parse().unwrap();
        if ms > 0 {
            c.warn_after = Some(Duration::from_millis(ms));
        }
        eprintln!("{:?}", wsp::run(&c, &mut ev));
    }
    if let Ok(i) = wsp::info(&img) {
        eprintln!(
            "info: state {} counter {} threads {} segs {}",
            i.state,
            i.counter,
            i.threads,
            i.segments.len()
        );
        for s in &i.segments {
            eprintln!(
                "  {:#x}+{:#x} {} {:?} {:#x} {}",
                s.addr, s.len, s.prot, s.kind, s.offset, s.name
            );
        }
    }
}
